package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/operators"
	"github.com/istio-aux/istio-aux/test/poll"
	"github.com/istio-aux/istio-aux/test/realnode"
)

const demoNamespace = "kubeflow-demo"

func demo() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logPath := filepath.Join(os.TempDir(), "istio-aux-local.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	step := func(format string, args ...any) {
		fmt.Printf("%s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	node := realnode.NodeUnavailable() == ""
	if node {
		step("on a real node: the kubelet, containerd and runc in network namespace %s; pods are real", realnode.NetnsPath())
	} else {
		step("on kwok's simulated node (real node unavailable: %s)", realnode.NodeUnavailable())
	}
	if node {
		step("starting a whole cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, a registry, the kubelet, CoreDNS) and istiod (process logs: %s)", logPath)
	} else {
		step("starting etcd, kube-apiserver, kube-controller-manager, kwok's node, istiod and istio-aux as processes (process logs: %s)", logPath)
	}
	m, err := mesh.Start(ctx, mesh.Options{Node: node, IstioAux: !node, Log: logf})
	if err != nil {
		return err
	}
	defer func() {
		step("stopping istio-aux, istiod, the node, kube-controller-manager, kube-apiserver and etcd")
		if err := m.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	c := m.Cluster
	if node {
		step("installing istio-aux as users do: ko apply -f config/ (images built by ko into the node's registry)")
		if _, err := istioaux.Install(ctx, c, istioaux.Config, logf); err != nil {
			return err
		}
		step("istio-aux installed: %s", c.PodsSummary(ctx, istioaux.SystemNamespace, ""))
	}
	if node {
		// The seed's own demo: its TFJob, run by the Kubeflow training
		// operator (tfjob.go).
		if err := tfjobStory(ctx, c, logf, step); err != nil {
			return err
		}
	} else if err := jobStory(ctx, c, step); err != nil {
		return err
	}
	kubectl, err := writeKubectl(c, node)
	if err != nil {
		return err
	}
	defer os.Remove(kubectl)
	kind, selector := "jobs", "batch.kubernetes.io/job-name=mnist"
	if node {
		kind, selector = "tfjobs", "training.kubeflow.org/job-name=mnist"
	}
	fmt.Printf("\nThe cluster stays up until Ctrl-C. Reach it with %s (any kubectl arguments), for example:\n"+
		"  %s get pods,%s -n %s\n  %s logs -n %s -l %s -c tensorflow\n"+
		"Your own Jobs: label a namespace istio-injection=enabled %s, and use an image its registry holds\n"+
		"(no internet here): %s (args: serve :8080 | exit N | probe URL; with no args it \"downloads\" through\n"+
		"the proxy, trains APP_RUN_FOR and exits; DEVELOPMENT.md lists its settings).\n",
		kubectl, kubectl, kind, demoNamespace, kubectl, demoNamespace, selector, operators.SeedOptIn, images.AppRef)
	<-ctx.Done()
	return nil
}

// writeKubectl writes an executable that runs this cluster's kubectl with
// its kubeconfig (inside the cluster's network namespace on the real node)
// and returns its path, relative to the working directory when it can.
func writeKubectl(c *cluster.Cluster, node bool) (string, error) {
	line := fmt.Sprintf("exec %s --kubeconfig %s \"$@\"\n", cluster.Kubectl(), c.Kubeconfig())
	if node {
		line = "exec nsenter --net=" + realnode.NetnsPath() + " " + strings.TrimPrefix(line, "exec ")
	}
	dir := filepath.Join(cluster.CacheDir(), "run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubectl")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n# make run's cluster; gone when make run stops.\n"+line), 0o755); err != nil {
		return "", err
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(rel, "..") {
			return rel, nil
		}
	}
	return path, nil
}

// jobStory is the demo on kwok's simulated node, where no operator runs:
// the seed's TFJob as the Job its operator would make, in an opted-in
// namespace, until it completes.
func jobStory(ctx context.Context, c *cluster.Cluster, step func(string, ...any)) error {
	if err := mesh.CreateNamespace(ctx, c.Client(), demoNamespace, mesh.OptedIn); err != nil {
		return err
	}
	job := mesh.TrainingJob("mnist", 2, corev1.RestartPolicyOnFailure, mesh.App{RunFor: "3s"}, nil)
	if _, err := c.Client().BatchV1().Jobs(demoNamespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return err
	}
	step("submitted Job %s/mnist (2 workers, restartPolicy OnFailure; each downloads its dataset through the proxy, then trains 3s)", demoNamespace)
	return timeline(ctx, c, step, 5*time.Minute, func(ctx context.Context) (bool, error) {
		j, err := c.Client().BatchV1().Jobs(demoNamespace).Get(ctx, "mnist", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if mesh.JobHas(j, batchv1.JobComplete) {
			step("job mnist Complete (%d/2 succeeded)", j.Status.Succeeded)
			return true, nil
		}
		return false, nil
	})
}

// timeline prints each pod's phase and ready count when it changes, and the
// ProxyQuit events, until done or the timeout.
func timeline(ctx context.Context, c *cluster.Cluster, step func(string, ...any), timeout time.Duration, done func(context.Context) (bool, error)) error {
	seen := map[string]string{}
	events := map[string]bool{}
	return poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		pods, err := c.Client().CoreV1().Pods(demoNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			ready := 0
			var states []string
			for _, s := range p.Status.ContainerStatuses {
				if s.Ready {
					ready++
				}
				st := "waiting"
				switch {
				case s.State.Running != nil:
					st = "running"
				case s.State.Terminated != nil:
					st = fmt.Sprintf("exited %d", s.State.Terminated.ExitCode)
				}
				states = append(states, s.Name+" "+st)
			}
			line := fmt.Sprintf("%-10s %d/%d  %s", p.Status.Phase, ready, len(p.Spec.Containers), strings.Join(states, ", "))
			if seen[p.Name] != line {
				seen[p.Name] = line
				step("pod %-16s %s", p.Name, line)
			}
		}
		evs, err := c.Client().CoreV1().Events(demoNamespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=ProxyQuit"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if !events[string(e.UID)] {
				events[string(e.UID)] = true
				step("event %s on pod %s: %s", e.Reason, e.InvolvedObject.Name, e.Message)
			}
		}
		return done(ctx)
	})
}
