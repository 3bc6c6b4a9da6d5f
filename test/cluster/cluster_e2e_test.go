//go:build e2e

package cluster_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// startKwok starts a control plane with kwok for one test, stopped (and its
// Stop checked) when the test ends. ctx bounds the test's own calls.
func startKwok(t *testing.T, log io.Writer) (context.Context, *cluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c, err := cluster.Start(ctx, cluster.Options{Kwok: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return ctx, c
}

// createPod creates pod default/name with the fake containers: istio-proxy
// (native when initProxy) and app, which runs for runFor per attempt.
func createPod(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, restart corev1.RestartPolicy, initProxy bool, annotations ...string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			RestartPolicy: restart,
			Containers:    []corev1.Container{{Name: "istio-proxy", Image: "proxyv2"}, {Name: "app", Image: "app"}},
		},
	}
	for i := 0; i+1 < len(annotations); i += 2 {
		pod.Annotations[annotations[i]] = annotations[i+1]
	}
	if initProxy {
		always := corev1.ContainerRestartPolicyAlways
		pod.Spec.InitContainers = []corev1.Container{{Name: "istio-proxy", Image: "proxyv2", RestartPolicy: &always}}
		pod.Spec.Containers = pod.Spec.Containers[1:]
	}
	if _, err := c.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestKwokPodLifecycle checks the harness itself: a classic-sidecar pod's
// app terminates while istio-proxy runs on, `kubectl exec ... pilot-agent
// request POST quitquitquit` through the real apiserver (WebSocket, then
// SPDY) reaches the stub for the right pod, and the pod then ends Succeeded.
func TestKwokPodLifecycle(t *testing.T) {
	ctx, c := startKwok(t, os.Stderr)
	for i, transport := range []string{"true", "false"} {
		name := []string{"websocket", "spdy"}[i]
		createPod(ctx, t, c, name, corev1.RestartPolicyNever, false, cluster.AnnotationRunFor, "1s")
		mesh.WaitPod(t, c, "default", name, 30*time.Second, func(p *corev1.Pod) bool {
			return cluster.ContainerStatus(p, "app").State.Terminated != nil && cluster.ContainerStatus(p, "istio-proxy").State.Running != nil
		})
		t.Setenv("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", transport)
		// kwok serves an exec once its own cache holds the pod's Exec, which
		// the harness creates with the pod: on a cluster just started that
		// can trail the pod's Running (seen once: "no exec found").
		err := poll.Until(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			err := c.Kubectl(ctx, "exec", "-n", "default", name, "-c", "istio-proxy", "--",
				"pilot-agent", "request", "POST", "quitquitquit")
			switch {
			case err == nil:
				return true, nil
			case strings.Contains(err.Error(), "no exec found"):
				return false, err // polled again; the last one explains a timeout
			default:
				return false, poll.Permanent(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		p := mesh.WaitPod(t, c, "default", name, 30*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		if s := cluster.ContainerStatus(p, "istio-proxy"); s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
			t.Errorf("%s: istio-proxy = %+v, want terminated with 0", name, s.State)
		}
		quits, err := c.Quits()
		if err != nil {
			t.Fatal(err)
		}
		if len(quits) != i+1 || quits[i].Name != name || quits[i].Namespace != "default" || quits[i].UID != string(p.UID) {
			t.Errorf("quits = %+v, want the %d-th for pod default/%s", quits, i+1, name)
		}
	}
}

// TestKwokNativeSidecar: a native istio-proxy (init container, restartPolicy
// Always) is stopped by the fake kubelet after the app, and the pod
// succeeds with no quit at all.
func TestKwokNativeSidecar(t *testing.T) {
	ctx, c := startKwok(t, io.Discard)
	createPod(ctx, t, c, "native", corev1.RestartPolicyOnFailure, true, cluster.AnnotationRunFor, "1s")
	p := mesh.WaitPod(t, c, "default", "native", 30*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	if s := p.Status.InitContainerStatuses; len(s) != 1 || s[0].State.Terminated == nil {
		t.Errorf("native istio-proxy = %+v, want terminated", s)
	}
	if q, _ := c.Quits(); len(q) != 0 {
		t.Errorf("quits = %+v, want none", q)
	}
}

// TestKwokOnFailureRestart: with restartPolicy OnFailure and exit codes
// "1,0" the app is restarted once (restartCount 1, lastState exit 1) and
// then exits 0 while istio-proxy runs on; a pod quit too early instead
// restarts an app without network, which fails (exit 1) for ever.
func TestKwokOnFailureRestart(t *testing.T) {
	ctx, c := startKwok(t, io.Discard)
	for _, name := range []string{"patient", "hasty"} {
		// 3s, not 1s: hasty's early quit (an exec, a patch, a Stage) must
		// land while its second attempt still runs, even on a loaded
		// machine, for that attempt to fail for want of a proxy.
		createPod(ctx, t, c, name, corev1.RestartPolicyOnFailure, false, cluster.AnnotationRunFor, "3s", cluster.AnnotationExitCodes, "1,0")
	}
	// hasty: quit as soon as the first attempt failed.
	mesh.WaitPod(t, c, "default", "hasty", 30*time.Second, func(p *corev1.Pod) bool {
		s := cluster.ContainerStatus(p, "app")
		return s.State.Terminated != nil && s.State.Terminated.ExitCode == 1 && s.RestartCount == 0
	})
	if err := c.Kubectl(ctx, "exec", "-n", "default", "hasty", "-c", "istio-proxy", "--", "pilot-agent", "request", "POST", "quitquitquit"); err != nil {
		t.Fatal(err)
	}
	p := mesh.WaitPod(t, c, "default", "patient", 30*time.Second, func(p *corev1.Pod) bool {
		s := cluster.ContainerStatus(p, "app")
		return s.RestartCount == 1 && s.State.Terminated != nil
	})
	if s := cluster.ContainerStatus(p, "app"); s.State.Terminated.ExitCode != 0 || s.LastTerminationState.Terminated == nil || s.LastTerminationState.Terminated.ExitCode != 1 {
		t.Errorf("patient app = %+v, want exit 0 after a first attempt that exited 1", s)
	}
	if cluster.ContainerStatus(p, "istio-proxy").State.Running == nil || p.Status.Phase != corev1.PodRunning {
		t.Errorf("patient: proxy not running or phase %s", p.Status.Phase)
	}
	h := mesh.WaitPod(t, c, "default", "hasty", 30*time.Second, func(p *corev1.Pod) bool { return cluster.ContainerStatus(p, "app").RestartCount >= 2 })
	if s := cluster.ContainerStatus(h, "app"); h.Status.Phase != corev1.PodRunning || (s.State.Terminated != nil && s.State.Terminated.ExitCode == 0) {
		t.Errorf("hasty: phase %s, app %+v; want it failing for want of a proxy", h.Status.Phase, s.State)
	}
}
