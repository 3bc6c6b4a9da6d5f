//go:build e2e

package node

import (
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/test/mesh"
)

// TestNodePodLogs: a pod runs on the real node and `kubectl logs` shows the
// app's own output through the API server and the kubelet; the pod
// Succeeds with the app's real exit code.
func TestNodePodLogs(t *testing.T) {
	c := nodeCluster(t)
	t.Parallel()
	ns := mesh.Namespace(t, c, "", false, nil)
	created := time.Now()
	mesh.CreatePod(t, c, mesh.Pod(ns, "logs", "", corev1.RestartPolicyNever,
		appContainer(map[string]string{"APP_NEEDS_NETWORK": "false", "APP_RUN_FOR": "1500ms"})))
	mesh.WaitPod(t, c, ns, "logs", 30*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	t.Logf("pod create -> Running: %s", time.Since(created).Round(time.Millisecond))
	p := mesh.WaitPod(t, c, ns, "logs", 30*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	t.Logf("pod create -> Succeeded: %s", time.Since(created).Round(time.Millisecond))
	if s := terminated(p, "app"); s == nil || s.ExitCode != 0 || s.Reason != "Completed" {
		t.Errorf("app = %s, want terminated(0,Completed)", mesh.Describe(p.Status.ContainerStatuses))
	}
	out, code := kubectl(t, c, "logs", "-n", ns, "logs", "-c", "app")
	for _, want := range []string{"app: attempt 1, will exit 0", "app: epoch 3/3 done", "app: exiting with 0"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("kubectl logs (exit %d) = %q, want a line %q", code, out, want)
		}
	}
}

// TestNodeExecExitCode: `kubectl exec` reaches the container through the
// kubelet and containerd's streaming server and reports the command's real
// exit code (kwok's exec loses it).
func TestNodeExecExitCode(t *testing.T) {
	c := nodeCluster(t)
	t.Parallel()
	ns := mesh.Namespace(t, c, "", false, nil)
	mesh.CreatePod(t, c, mesh.Pod(ns, "exec", "", corev1.RestartPolicyNever,
		appContainer(map[string]string{"APP_NEEDS_NETWORK": "false", "APP_RUN_FOR": "10m"})))
	mesh.WaitPod(t, c, ns, "exec", 30*time.Second, func(p *corev1.Pod) bool { return running(p, "app") })
	for _, tc := range []struct {
		transport string
		code      int
	}{{"true", 7}, {"false", 3}, {"true", 0}} {
		out, code := kubectlEnv(t, c, []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + tc.transport},
			"exec", "-n", ns, "exec", "-c", "app", "--", "/app", "exit", strconv.Itoa(tc.code))
		if code != tc.code {
			t.Errorf("kubectl exec (websockets=%s) exited %d, want %d: %s", tc.transport, code, tc.code, out)
		}
	}
}
