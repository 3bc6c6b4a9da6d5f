//go:build e2e

package config

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// The two transports of an exec, as client-go speaks them.
const (
	webSocket = "websocket" // GET, RBAC verb get (and create since 1.35)
	spdy      = "spdy"      // POST, RBAC verb create
)

var transports = []string{webSocket, spdy}

var defaultArgv = strings.Fields(settings.DefaultQuitCommand)

// execRequest is one exec: where, what, and with which streams.
type execRequest struct {
	ns, pod string
	opts    corev1.PodExecOptions
}

// quitIn is the function's own request: argv (by default the quit command)
// in istio-proxy, stdout and stderr only.
func quitIn(ns, pod string, argv ...string) execRequest {
	if len(argv) == 0 {
		argv = defaultArgv
	}
	return execRequest{ns: ns, pod: pod, opts: corev1.PodExecOptions{
		Container: keys.ProxyContainer, Command: argv, Stdout: true, Stderr: true,
	}}
}

// inApp runs argv in the app container of ns/target.
func inApp(ns string, argv ...string) execRequest {
	return execRequest{ns: ns, pod: "target", opts: corev1.PodExecOptions{Container: "app", Command: argv, Stdout: true, Stderr: true}}
}

// with is r with its options changed by f.
func (r execRequest) with(f func(*corev1.PodExecOptions)) execRequest {
	f(&r.opts)
	return r
}

// execOver runs r through the API server over one transport and returns
// its stdout.
func execOver(ctx context.Context, rc *rest.Config, transport string, r execRequest) (string, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return "", err
	}
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.ns).Name(r.pod).SubResource("exec").
		VersionedParams(&r.opts, scheme.ParameterCodec).URL()
	var ex remotecommand.Executor
	switch transport {
	case webSocket:
		ex, err = remotecommand.NewWebSocketExecutor(rc, "GET", u.String())
	case spdy:
		ex, err = remotecommand.NewSPDYExecutor(rc, "POST", u)
	default:
		err = fmt.Errorf("unknown transport %q", transport)
	}
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	so := remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr, Tty: r.opts.TTY}
	if r.opts.Stdin {
		so.Stdin = strings.NewReader("id\n")
	}
	if r.opts.TTY {
		so.Stderr = nil // a TTY merges stderr into stdout
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = ex.StreamWithContext(ctx, so)
	return stdout.String(), err
}

// statusOf digs the API server's Status out of an exec error: SPDY returns
// it as is, WebSocket inside an UpgradeFailureError (which has no Unwrap).
func statusOf(err error) *apierrors.StatusError {
	var upgrade *httpstream.UpgradeFailureError
	if errors.As(err, &upgrade) {
		err = upgrade.Cause
	}
	var status *apierrors.StatusError
	if errors.As(err, &status) {
		return status
	}
	return nil
}

// policyNamespaces labels (or creates) the namespaces the function's
// policies are tried in: each way to opt in (jobs, legacy-jobs, pod-jobs),
// one that did not (other), and two system namespaces that opted in
// (kube-system, istio-aux), which must not help.
func policyNamespaces(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	for ns, labels := range map[string]map[string]string{
		"jobs":        {keys.LabelEnabled: "true"},
		"legacy-jobs": {keys.LegacyLabel: keys.LegacyLabelValue},
		"pod-jobs":    {keys.LabelEnabled: "pods"},
		"other":       {},
		"kube-system": {keys.LabelEnabled: "true"},
		"istio-aux":   {keys.LabelEnabled: "true"},
	} {
		nss := c.Client().CoreV1().Namespaces()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
		_, err := nss.Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			_, err = nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// denial is the message the API server gives for a policy's validation
// (each policy has one binding of its own name).
func denial(policy, message string) string {
	return fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", policy, policy, message)
}

// TestExecPolicy applies config/ (RBAC and the exec policies) to a real
// kube-apiserver with a kwok node that serves exec, then execs as the
// function's ServiceAccount (its own token) and as a cluster admin, over
// WebSocket and over SPDY.
func TestExecPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := startWithConfig(ctx, t, cluster.Options{Kwok: true})
	// No webhook runs here: its configuration would refuse the pods of
	// opted-in namespaces it cannot reach (failurePolicy Fail).
	if err := c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "istio-aux-webhook", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	admin := c.RESTConfig()
	fn, err := clientcmd.BuildConfigFromFlags("", serviceAccountKubeconfig(ctx, t, c, "istio-aux-proxyquit"))
	if err != nil {
		t.Fatal(err)
	}

	policyNamespaces(ctx, t, c)
	pods := []string{
		"jobs/target", "jobs/quit-websocket", "jobs/quit-spdy", "jobs/probe", "jobs/param-probe",
		"legacy-jobs/quit", "pod-jobs/quit", "other/target", "kube-system/target", "istio-aux/target",
	}
	for _, p := range pods {
		// Shaped like an injected Job pod whose app runs for an hour:
		// istio-proxy stays running, so only a quit would stop it.
		ns, name, _ := strings.Cut(p, "/")
		pod := mesh.Pod(ns, name, "", corev1.RestartPolicyNever,
			corev1.Container{Name: keys.ProxyContainer, Image: "proxyv2"}, corev1.Container{Name: "app", Image: "app"})
		pod.Annotations = map[string]string{cluster.AnnotationRunFor: "3600s"}
		if ns == "istio-aux" {
			// Its namespace enforces Pod Security's restricted level
			// (100-namespace.yaml): a pod that misses it is refused.
			for i := range pod.Spec.Containers {
				pod.Spec.Containers[i].SecurityContext = restrictedContext()
			}
		}
		mesh.CreatePod(t, c, pod)
	}
	for _, p := range pods {
		ns, name, _ := strings.Cut(p, "/")
		mesh.WaitPod(t, c, ns, name, time.Minute, func(p *corev1.Pod) bool {
			return cluster.ContainerStatus(p, keys.ProxyContainer).State.Running != nil
		})
	}
	waitForPolicies(ctx, t, fn)

	t.Run("the function quits over each transport", func(t *testing.T) {
		for _, tr := range transports {
			out, err := execOver(ctx, fn, tr, quitIn("jobs", "quit-"+tr))
			if err != nil || strings.TrimSpace(out) != "OK" {
				t.Errorf("%s: quit = %q, %v; want the stub's OK", tr, out, err)
			}
		}
	})
	t.Run("the function's own executor quits in every kind of opted-in namespace", func(t *testing.T) {
		ex, err := proxyquit.NewRemoteExecer(fn)
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range []string{"legacy-jobs", "pod-jobs"} {
			if out, err := ex.Exec(ctx, ns, "quit", keys.ProxyContainer, defaultArgv); err != nil || strings.TrimSpace(out.Stdout) != "OK" {
				t.Errorf("%s/quit: quit = %+v, %v; want the stub's OK", ns, out, err)
			}
		}
	})

	const (
		onlyProxy = "istio-aux-proxyquit may exec only in container istio-proxy, not "
		onlyQuit  = "istio-aux-proxyquit may run only the quit-command of ConfigMap istio-aux/config-istio-aux: "
	)
	target := quitIn("jobs", "target")
	denied := []struct {
		name   string
		req    execRequest
		policy string
		msg    string
	}{
		{"another container", target.with(func(o *corev1.PodExecOptions) { o.Container = "app" }), execPolicy, onlyProxy + `"app"`},
		{"no container", target.with(func(o *corev1.PodExecOptions) { o.Container = "" }), execPolicy, onlyProxy + `""`},
		{"another command", quitIn("jobs", "target", "pilot-agent", "request", "GET", "config_dump"),
			execCommandPolicy, onlyQuit + settings.DefaultQuitCommand},
		{"a shell", quitIn("jobs", "target", "sh", "-c", "id"), execCommandPolicy, onlyQuit + settings.DefaultQuitCommand},
		{"the quit command plus an argument", quitIn("jobs", "target", append(defaultArgv, "--debug-port=15020")...),
			execCommandPolicy, onlyQuit + settings.DefaultQuitCommand},
		{"stdin", target.with(func(o *corev1.PodExecOptions) { o.Stdin = true }), execPolicy, "istio-aux-proxyquit may not exec with stdin"},
		{"a TTY", target.with(func(o *corev1.PodExecOptions) { o.TTY, o.Stderr = true, false }),
			execPolicy, "istio-aux-proxyquit may not exec with a TTY"},
		{"a namespace not opted in", quitIn("other", "target"), execPolicy,
			"istio-aux-proxyquit may not exec in namespace other: not opted in (label it istio-aux.dev/enabled=true, or =pods to let its pods opt in one by one)"},
		{"kube-system, even labelled", quitIn("kube-system", "target"),
			execPolicy, "istio-aux-proxyquit may not exec in the system namespace kube-system"},
		{"istio-aux, even labelled", quitIn("istio-aux", "target"),
			execPolicy, "istio-aux-proxyquit may not exec in the system namespace istio-aux"},
	}
	t.Run("the function is denied", func(t *testing.T) {
		for _, tc := range denied {
			for _, tr := range transports {
				_, err := execOver(ctx, fn, tr, tc.req)
				want := fmt.Sprintf(`pods "%s" is forbidden: %s`, tc.req.pod, denial(tc.policy, tc.msg))
				if st := statusOf(err); st == nil || st.ErrStatus.Code != 403 || st.ErrStatus.Message != want {
					t.Errorf("%s over %s: err = %v, want 403 %q", tc.name, tr, err, want)
				}
			}
		}
	})
	t.Run("only the allowed quits reached the node", func(t *testing.T) {
		want := map[string]bool{"jobs/quit-websocket": true, "jobs/quit-spdy": true, "legacy-jobs/quit": true, "pod-jobs/quit": true}
		quits, err := c.Quits()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, q := range quits {
			got[q.Namespace+"/"+q.Name] = true
			if strings.Join(q.Args, " ") != settings.DefaultQuitCommand {
				t.Errorf("quit %+v ran %q", q, q.Args)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("quits reached %v, want exactly %v", got, want)
		}
	})
	t.Run("a cluster admin is not affected", func(t *testing.T) {
		for _, ns := range []string{"kube-system", "other", "jobs"} {
			for _, tr := range transports {
				if out, err := execOver(ctx, admin, tr, inApp(ns, "echo", "admin", tr)); err != nil || out != "admin "+tr+"\n" {
					t.Errorf("admin echo in %s/target app over %s = %q, %v", ns, tr, out, err)
				}
			}
		}
	})

	// The policy reads quit-command live, split on any white space like the
	// function; the function would need a new revision to follow.
	t.Run("quit-command is read from config-istio-aux", func(t *testing.T) {
		setConfig(ctx, t, c, map[string]string{"quit-command": "pilot-agent\trequest  POST /quitquitquit"})
		custom := []string{"pilot-agent", "request", "POST", "/quitquitquit"}
		err := poll.Until(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			_, err := execOver(ctx, fn, spdy, quitIn("jobs", "param-probe", custom...))
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("the configured argv %q was never allowed: %v", custom, err)
		}
		want := denial(execCommandPolicy, onlyQuit+"pilot-agent request POST /quitquitquit")
		for _, tr := range transports {
			_, err := execOver(ctx, fn, tr, target)
			if st := statusOf(err); st == nil || !strings.Contains(st.ErrStatus.Message, want) {
				t.Errorf("the default argv after the change, over %s: err = %v, want %q", tr, err, want)
			}
		}
	})

	// Deny when config-istio-aux is missing: for everybody (the param is
	// looked up before matchConditions), but only in opted-in namespaces
	// (the bindings' scope), never in system ones, even labelled.
	t.Run("a missing config-istio-aux fails closed, in opted-in namespaces only", func(t *testing.T) {
		if err := c.Client().CoreV1().ConfigMaps("istio-aux").Delete(ctx, "config-istio-aux", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		want := denial(execCommandPolicy, "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction")
		err := poll.Until(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			_, err := execOver(ctx, admin, spdy, inApp("jobs", "echo", "ok"))
			return err != nil && strings.Contains(err.Error(), want), nil
		})
		if err != nil {
			t.Fatalf("admin exec in jobs never denied for the missing ConfigMap: %v", err)
		}
		if _, err := execOver(ctx, fn, webSocket, target); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the function's quit in jobs: err = %v, want %q", err, want)
		}
		for _, ns := range []string{"kube-system", "other"} {
			if out, err := execOver(ctx, admin, spdy, inApp(ns, "echo", "ok")); err != nil || out != "ok\n" {
				t.Errorf("admin exec in %s with config-istio-aux missing = %q, %v; want it unaffected", ns, out, err)
			}
		}
	})
}

// waitForPolicies returns once both policies are in force for fn: the API
// server loads policies, bindings and the ConfigMap params through
// informers, a moment after they are created. Each probe breaks one policy
// only (a request that breaks both is refused in the name of either,
// whichever the API server happens to evaluate first), and is harmless if
// it does run (`true`, not a quit).
func waitForPolicies(ctx context.Context, t *testing.T, fn *rest.Config) {
	t.Helper()
	for _, probe := range []struct {
		req  execRequest
		want string
	}{
		// "other" is not opted in: the argv policy is not bound there.
		{inApp("other", "true"), "istio-aux-proxyquit may not exec in namespace other"},
		{quitIn("jobs", "probe", "true"), "istio-aux-proxyquit may run only the quit-command"},
	} {
		var last error
		err := poll.Until(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := execOver(attempt, fn, spdy, probe.req)
			if ctx.Err() == nil { // not cut short by the poll's own deadline
				last = err
			}
			return err != nil && strings.Contains(err.Error(), probe.want), nil
		})
		if err != nil {
			t.Fatalf("policy not in force (want %q): %v; last exec error: %v", probe.want, err, last)
		}
	}
}
