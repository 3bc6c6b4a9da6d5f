//go:build e2e

package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	plugin "github.com/istio-aux/istio-aux/kubectl"
	"github.com/istio-aux/istio-aux/kubectl/check"
	"github.com/istio-aux/istio-aux/kubectl/explain"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/modroot"
	"github.com/istio-aux/istio-aux/test/poll"
	"github.com/istio-aux/istio-aux/test/scenario"
)

// kubectl istio-aux on real pods (issue 33): the plugin built as users
// build it, found by the cluster's kubectl on PATH, run with the cluster's
// kubeconfig, and asked about pods in each state; its exit code and its
// JSON say what the state is.

// TestNodeExplain: a pod waiting for its app under OnFailure, a pod whose
// proxy was quit, a native-sidecar pod and a pod outside the opt-in.
func TestNodeExplain(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	bin := buildPlugin(t)
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	outside := mesh.Namespace(t, c, "-outside", true, nil)

	mesh.CreateJob(t, c, ns, meshJob("waiting", 1, corev1.RestartPolicyOnFailure, worker(map[string]string{"APP_RUN_FOR": "5m"})))
	// Outside the opt-in nothing holds the app for its proxy: it must not
	// need the network to start.
	mesh.CreateJob(t, c, outside, meshJob("outside", 1, corev1.RestartPolicyNever, worker(map[string]string{"APP_RUN_FOR": "5m", "APP_NEEDS_NETWORK": "false"})))
	mesh.CreateJob(t, c, ns, meshJob("quit", 1, corev1.RestartPolicyNever, worker(nil)))
	native := meshJob("native", 1, corev1.RestartPolicyNever, worker(nil))
	native.Spec.Template.Annotations = map[string]string{keys.AnnotationNativeSidecar: "true"}
	mesh.CreateJob(t, c, ns, native)
	t.Cleanup(func() { deleteJobs(t, c, ns, "waiting"); deleteJobs(t, c, outside, "outside") })

	mesh.WaitJob(t, c, ns, "quit", batchv1.JobComplete, 3*time.Minute)
	mesh.WaitJob(t, c, ns, "native", batchv1.JobComplete, 3*time.Minute)
	quit := mesh.OnlyPod(t, c, ns, "quit")
	mesh.WaitEvent(t, c, ns, quit.Name, "ProxyQuit")
	waiting := appRunning(t, c, ns, "waiting")
	out := appRunning(t, c, outside, "outside")

	t.Run("waiting", func(t *testing.T) {
		p := explainOne(t, c, bin, plugin.ExitOK, "-n", ns, waiting.Name)
		if p.Decision.Outcome != "wait" || !p.Hold.Present || p.Hold.How != explain.HowProxyFirst || p.Proxy != explain.ProxyClassic ||
			!strings.Contains(p.Next, "waiting for app tensorflow (running)") {
			t.Errorf("%+v: want a held classic proxy waiting for its running app", p)
		}
	})
	t.Run("quit", func(t *testing.T) {
		p := explainOne(t, c, bin, plugin.ExitOK, "-n", ns, "pod/"+quit.Name)
		if p.Decision.Reason != "pod has finished" || len(p.Events) == 0 || p.Events[len(p.Events)-1].Reason != "ProxyQuit" ||
			!strings.Contains(p.Next, "istio-aux quit it at") {
			t.Errorf("%+v: want a finished pod whose last Event is its ProxyQuit", p)
		}
	})
	t.Run("native", func(t *testing.T) {
		p := explainOne(t, c, bin, plugin.ExitOK, "-n", ns, mesh.OnlyPod(t, c, ns, "native").Name)
		if p.Proxy != explain.ProxyNative || p.Hold.How != explain.HowNative || len(p.Events) != 0 {
			t.Errorf("%+v: want a native sidecar left to the kubelet, no Event of istio-aux's", p)
		}
	})
	t.Run("outside", func(t *testing.T) {
		p := explainOne(t, c, bin, plugin.ExitAttention, "-n", outside, out.Name)
		if p.OptIn.OptedIn || p.Verdict != explain.VerdictOutside || p.Hold.Cause != explain.CauseNotOptedIn {
			t.Errorf("%+v: want a pod outside the opt-in", p)
		}
	})
	t.Run("selector", func(t *testing.T) {
		r, code := explainJSON(t, c, bin, "-n", ns, "-l", batchv1.JobNameLabel+"=quit")
		if code != plugin.ExitOK || len(r.Pods) != 1 || r.Pods[0].Name != quit.Name {
			t.Errorf("exit %d, %d pods: want the quit Job's one pod", code, len(r.Pods))
		}
	})
	t.Run("all", func(t *testing.T) {
		if r, code := explainJSON(t, c, bin, "-n", ns, "--all"); code != plugin.ExitOK || len(r.Pods) != 3 {
			t.Errorf("exit %d, %d pods: want the namespace's 3 pods, all fine", code, len(r.Pods))
		}
	})
	t.Run("text", func(t *testing.T) {
		stdout, code := istioAux(t, c, bin, "explain", "-n", ns, waiting.Name)
		if code != plugin.ExitOK || !strings.Contains(stdout, "pod "+ns+"/"+waiting.Name+": ok") || !strings.Contains(stdout, "app tensorflow is running") {
			t.Errorf("exit %d:\n%s", code, stdout)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, code := istioAux(t, c, bin, "explain", "-n", ns, "no-such-pod"); code != plugin.ExitUsage {
			t.Errorf("exit %d for a pod that does not exist, want %d", code, plugin.ExitUsage)
		}
	})
}

// TestNodeExplainWithoutHold: a pod created before its namespace opted in
// has no hold, and explain says so, and why.
func TestNodeExplainWithoutHold(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	bin := buildPlugin(t)
	ns := mesh.Namespace(t, c, "", true, nil)
	// Not held for its proxy (the namespace is not opted in yet): its app
	// must not need the network to start.
	mesh.CreateJob(t, c, ns, meshJob("early", 1, corev1.RestartPolicyNever, worker(map[string]string{"APP_RUN_FOR": "5m", "APP_NEEDS_NETWORK": "false"})))
	t.Cleanup(func() { deleteJobs(t, c, ns, "early") })
	p := appRunning(t, c, ns, "early")
	mesh.Relabel(t, c, ns, map[string]any{keys.LabelEnabled: "true"})
	got := explainOne(t, c, bin, plugin.ExitProblem, "-n", ns, p.Name)
	if got.Hold.Present || got.Hold.Cause != explain.CauseCreatedBeforeOptIn || len(got.Problems) == 0 ||
		!strings.Contains(got.Problems[0], "admitted without the hold") {
		t.Errorf("%+v: want the hold missing, the namespace labelled after the pod's creation", got)
	}
}

// TestNodeExplainQuitDenied: the exec policy refuses quits in system
// namespaces whatever their labels; a Job run in istio-system, labelled for
// Istio and istio-aux, gets the hold and the bridge's attention, but its
// quit is denied. explain names the policy. Not parallel: it labels a
// namespace every test shares (and restores it).
func TestNodeExplainQuitDenied(t *testing.T) {
	c, _ := meshCluster(t)
	bin := buildPlugin(t)
	const ns = "istio-system"
	mesh.Relabel(t, c, ns, map[string]any{keys.LabelInjection: "enabled", keys.LabelEnabled: "true"})
	j := meshJob("denied", 1, corev1.RestartPolicyNever, worker(nil))
	j.Spec.BackoffLimit = ptr.To(int32(0))
	mesh.CreateJob(t, c, ns, j)
	t.Cleanup(func() { deleteJobs(t, c, ns, "denied") })
	var p corev1.Pod
	if err := poll.Until(context.Background(), 3*time.Minute, func(context.Context) (bool, error) {
		pods := mesh.Pods(t, c, ns, "denied")
		if len(pods) != 1 {
			return false, nil
		}
		p = pods[0]
		return mesh.CountEvents(mesh.Events(t, c, ns, p.Name), "ProxyQuitFailed") > 0, nil
	}); err != nil {
		t.Fatalf("no ProxyQuitFailed Event: %v", err)
	}
	got := explainOne(t, c, bin, plugin.ExitProblem, "-n", ns, p.Name)
	if len(got.Problems) == 0 || !strings.Contains(got.Problems[len(got.Problems)-1], "exec policy "+names.ExecPolicy) ||
		!strings.Contains(got.Problems[len(got.Problems)-1], "system namespace") || got.Decision.Outcome != "quit" {
		t.Errorf("%+v: want the quit decided and its denial by %s explained", got, names.ExecPolicy)
	}
}

// TestNodeCheck: check on the install as config/ has it finds nothing
// wrong; with the exec policy's binding deleted it fails that item and
// exits 1. Not parallel: it deletes a binding every quit depends on (and
// puts it back).
func TestNodeCheck(t *testing.T) {
	c, _ := meshCluster(t)
	bin := buildPlugin(t)
	r, code := checkJSON(t, c, bin)
	if code == plugin.ExitProblem || !r.OK || r.Shape != check.ShapeConfig {
		t.Errorf("exit %d, %+v: want no item failed on a healthy install", code, r)
	}
	// These must be OK here. The others may warn for reasons of this one
	// node and this test's order, not of istio-aux: NATS replicas that
	// cannot spread, no namespace opted in yet, the backlog read through
	// the pod proxy, a bridge that predates its Lease.
	essential := []string{check.ItemWebhookConfiguration, check.ItemWebhookCertificate, check.ItemWebhookEndpoints,
		check.ItemConfig, check.ItemExecPolicy, check.ItemFunction}
	for _, it := range r.Items {
		switch {
		case slices.Contains(essential, it.Name) && it.Status != check.StatusOK:
			t.Errorf("%s: %s %q, want ok", it.Name, it.Status, it.Message)
		case it.Status != check.StatusOK:
			t.Logf("%s: %s %s", it.Name, it.Status, it.Message)
		}
	}

	ctx := context.Background()
	bindings := c.Client().AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	b, err := bindings.Get(ctx, names.ExecBinding, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bindings.Delete(ctx, names.ExecBinding, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.ResourceVersion, b.UID = "", ""
		if _, err := bindings.Create(context.Background(), b, metav1.CreateOptions{}); err != nil {
			t.Errorf("restoring binding %s: %v", names.ExecBinding, err)
		}
	})
	r, code = checkJSON(t, c, bin)
	for _, it := range r.Items {
		if it.Name == check.ItemExecPolicy && (it.Status != check.StatusFail || !strings.Contains(it.Message, "binding "+names.ExecBinding+" is missing")) {
			t.Errorf("exec-policy: %s %q, want it failed for the missing binding", it.Status, it.Message)
		}
	}
	if code != plugin.ExitProblem || r.OK {
		t.Errorf("exit %d, ok %v: want 1 and not ok with the binding deleted", code, r.OK)
	}
}

// buildPlugin builds kubectl-istio_aux into a directory of the test's own,
// which istioAux puts on kubectl's PATH.
func buildPlugin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "kubectl-istio_aux"), "./cmd/kubectl-istio_aux")
	cmd.Dir = modroot.Dir()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v: %s", err, out)
	}
	return dir
}

// istioAux runs `kubectl istio-aux args...` as a user does: the cluster's
// kubectl finds the plugin on PATH and passes it KUBECONFIG. It returns
// stdout and the exit code (stderr is logged).
func istioAux(t *testing.T, c *cluster.Cluster, dir string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.Kubectl(), append([]string{"istio-aux"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("kubectl istio-aux %s: %s", strings.Join(args, " "), stderr.String())
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return stdout.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("kubectl istio-aux %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), 0
}

// explainJSON runs explain with -o json.
func explainJSON(t *testing.T, c *cluster.Cluster, dir string, args ...string) (explain.Report, int) {
	t.Helper()
	stdout, code := istioAux(t, c, dir, append([]string{"explain", "-o", "json"}, args...)...)
	var r explain.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("explain %v (exit %d): %v: %s", args, code, err, stdout)
	}
	return r, code
}

// explainOne explains one pod, expecting the exit code want.
func explainOne(t *testing.T, c *cluster.Cluster, dir string, want int, args ...string) explain.Pod {
	t.Helper()
	r, code := explainJSON(t, c, dir, args...)
	if len(r.Pods) != 1 {
		t.Fatalf("explain %v: %d pods, want 1", args, len(r.Pods))
	}
	if code != want {
		t.Errorf("explain %v: exit %d, want %d: %+v", args, code, want, r.Pods[0])
	}
	return r.Pods[0]
}

// checkJSON runs check with -o json.
func checkJSON(t *testing.T, c *cluster.Cluster, dir string) (check.Report, int) {
	t.Helper()
	stdout, code := istioAux(t, c, dir, "check", "-o", "json")
	var r check.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("check (exit %d): %v: %s", code, err, stdout)
	}
	return r, code
}

// appRunning waits until the Job's one pod runs its app, and returns it.
func appRunning(t *testing.T, c *cluster.Cluster, ns, job string) corev1.Pod {
	t.Helper()
	var p corev1.Pod
	poll.Eventually(t, 3*time.Minute, "job "+ns+"/"+job+"'s app running", func(context.Context) (bool, error) {
		pods := mesh.Pods(t, c, ns, job)
		if len(pods) == 1 {
			p = pods[0]
		}
		return len(pods) == 1 && running(&p, scenario.App), nil
	})
	return p
}

// deleteJobs deletes Jobs and their pods, as the end of a test.
func deleteJobs(t *testing.T, c *cluster.Cluster, ns string, names ...string) {
	t.Helper()
	for _, name := range names {
		err := c.Client().BatchV1().Jobs(ns).Delete(context.Background(), name,
			metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil {
			t.Errorf("deleting job %s/%s: %v", ns, name, err)
		}
	}
}
