package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/istioaux"
)

const demoNamespace = "kubeflow-demo"

func demo(ctx context.Context) error {
	logPath := filepath.Join(os.TempDir(), "istio-aux-local.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	step := func(format string, args ...any) {
		fmt.Printf("%s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	step("starting etcd, kube-apiserver, kube-controller-manager and kwok (process logs: %s)", logPath)
	c, err := cluster.Start(ctx, cluster.Options{ControllerManager: true, Kwok: true, Log: logf})
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	step("starting istiod as the sidecar injector")
	istiod, err := istio.Start(ctx, c, istio.Options{NativeSidecars: "false", Log: logf})
	if err != nil {
		return err
	}
	defer func() {
		if err := istiod.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	step("starting istio-aux (webhook, bridge with embedded NATS)")
	aux, err := istioaux.Start(ctx, c, logf)
	if err != nil {
		return err
	}
	defer aux.Stop()

	cs := c.Client()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace, Labels: map[string]string{
		"istio-injection": "enabled", keys.LabelEnabled: "true",
	}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.BatchV1().Jobs(demoNamespace).Create(ctx, mnistJob(), metav1.CreateOptions{}); err != nil {
		return err
	}
	step("submitted Job %s/mnist (2 workers, app runs 3s, restartPolicy OnFailure)", demoNamespace)
	if err := timeline(ctx, c, step); err != nil {
		return err
	}
	fmt.Printf("\nThe cluster stays up until Ctrl-C. Try:\n  export KUBECONFIG=%s\n  %s get pods,jobs -n %s\n  %s get events -n %s\n",
		c.Kubeconfig(), filepath.Join(c.BinDir(), "kubectl"), demoNamespace, filepath.Join(c.BinDir(), "kubectl"), demoNamespace)
	<-ctx.Done()
	step("stopping istio-aux, istiod, kwok, kube-controller-manager, kube-apiserver and etcd")
	return nil
}

func mnistJob() *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "mnist"},
		Spec: batchv1.JobSpec{
			Completions: ptr.To(int32(2)), Parallelism: ptr.To(int32(2)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{cluster.AnnotationRunFor: "3s"}},
				Spec: corev1.PodSpec{
					// A real cluster's ServiceAccount admission plugin sets
					// this; the local API server runs without it, and
					// istiod's injected token volume needs it.
					ServiceAccountName: istio.ServiceAccount,
					RestartPolicy:      corev1.RestartPolicyOnFailure,
					Containers: []corev1.Container{{
						Name: "tensorflow", Image: "kubeflow/tf-mnist", Command: []string{"python", "-u", "mnist.py"},
					}},
				},
			},
		},
	}
}

// timeline prints each pod's phase and ready count when it changes, and the
// ProxyQuit events, until the Job completes.
func timeline(ctx context.Context, c *cluster.Cluster, step func(string, ...any)) error {
	seen := map[string]string{}
	events := map[string]bool{}
	return cluster.Poll(ctx, 200*time.Millisecond, 5*time.Minute, func(ctx context.Context) (bool, error) {
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
		j, err := c.Client().BatchV1().Jobs(demoNamespace).Get(ctx, "mnist", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				step("job mnist Complete (%d/2 succeeded)", j.Status.Succeeded)
				return true, nil
			}
		}
		return false, nil
	})
}
