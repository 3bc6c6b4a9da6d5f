package kubectl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/istio-aux/istio-aux/kubectl"
	"github.com/istio-aux/istio-aux/kubectl/check"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// kubeconfig writes a kubeconfig whose context's namespace is ns: the
// tests read no kubeconfig of the machine's.
func kubeconfig(t *testing.T, ns string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: ` + ns + `}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs the plugin against fakes holding objects.
func run(t *testing.T, objects []runtime.Object, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	connect := func(cc clientcmd.ClientConfig) (kubectl.Clients, error) {
		ns, _, err := cc.Namespace()
		dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{check.KnativeServices: "ServiceList"})
		return kubectl.Clients{Kube: fake.NewClientset(objects...), Dynamic: dyn, Namespace: ns}, err
	}
	var out, errOut bytes.Buffer
	code = kubectl.Main(context.Background(), args, &out, &errOut, connect)
	return out.String(), errOut.String(), code
}

var optedIn = map[string]string{"istio-aux.dev/enabled": "true"}

func ns(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// pod is a Job's pod whose app runs, with a classic istio-proxy injected
// with the hold, or (hold false) last without it.
func pod(namespace, name string, hold bool) *corev1.Pod {
	proxy := corev1.Container{Name: "istio-proxy"}
	containers := []corev1.Container{{Name: "train"}, proxy}
	if hold {
		proxy.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"pilot-agent", "wait"}}}}
		containers = []corev1.Container{proxy, {Name: "train"}}
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"job": name}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: containers},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "istio-proxy", State: running}, {Name: "train", State: running}}}}
}

// TestExitCodes: what each command's exit code says, through Main.
func TestExitCodes(t *testing.T) {
	objects := []runtime.Object{ns("jobs", optedIn), ns("plain", nil), pod("jobs", "held", true), pod("jobs", "unheld", false),
		pod("plain", "outside", false), pod("plain", "outside-2", false)}
	jobs := "--kubeconfig=" + kubeconfig(t, "jobs")
	tests := map[string]struct {
		args   []string
		code   int
		stdout string // a part of it
		stderr string
	}{
		"no command":                   {nil, kubectl.ExitUsage, "", "Usage:"},
		"help":                         {[]string{"--help"}, kubectl.ExitOK, "Exit codes:", ""},
		"an unknown command":           {[]string{"describe"}, kubectl.ExitUsage, "", `unknown command "describe"`},
		"explain's help":               {[]string{"explain", "-h"}, kubectl.ExitOK, "3  nothing is wrong", ""},
		"explain nothing":              {[]string{"explain", jobs}, kubectl.ExitUsage, "", "name the pods, or give -l SELECTOR or --all"},
		"names and a selector":         {[]string{"explain", jobs, "held", "-l", "job=held"}, kubectl.ExitUsage, "", "only one of them"},
		"not a pod":                    {[]string{"explain", jobs, "deploy/held"}, kubectl.ExitUsage, "", `"deploy/held" is not a pod`},
		"an unknown flag":              {[]string{"explain", jobs, "--watch", "held"}, kubectl.ExitUsage, "", "unknown flag: --watch"},
		"an unknown output":            {[]string{"check", jobs, "-o", "yaml"}, kubectl.ExitUsage, "", `--output "yaml": want text or json`},
		"check takes no argument":      {[]string{"check", jobs, "all"}, kubectl.ExitUsage, "", "check takes no arguments"},
		"a missing pod":                {[]string{"explain", jobs, "gone"}, kubectl.ExitUsage, "", `pods "gone" not found`},
		"a selector matching nothing":  {[]string{"explain", jobs, "-l", "job=none"}, kubectl.ExitUsage, "", "no pods matched selector job=none in namespace jobs"},
		"a pod handled":                {[]string{"explain", jobs, "held"}, kubectl.ExitOK, "pod jobs/held: ok", ""},
		"kubectl's spelling of a pod":  {[]string{"explain", jobs, "pod/held"}, kubectl.ExitOK, "pod jobs/held: ok", ""},
		"a pod without the hold":       {[]string{"explain", jobs, "unheld"}, kubectl.ExitProblem, "PROBLEM:   admitted without the hold", ""},
		"-n wins over the context":     {[]string{"explain", jobs, "-n", "plain", "outside"}, kubectl.ExitAttention, "pod plain/outside: outside", ""},
		"every pod: the worst counts":  {[]string{"explain", jobs, "--all"}, kubectl.ExitProblem, "pod jobs/held: ok", ""},
		"a selector":                   {[]string{"explain", jobs, "-l", "job=held"}, kubectl.ExitOK, "pod jobs/held: ok", ""},
		"outside beats ok":             {[]string{"explain", jobs, "-n", "plain", "--all"}, kubectl.ExitAttention, "pod plain/outside-2: outside", ""},
		"check an empty cluster":       {[]string{"check", jobs}, kubectl.ExitProblem, "FAIL  webhook-configuration", ""},
		"check's help":                 {[]string{"check", "--help"}, kubectl.ExitOK, "--verbose", ""},
		"a kubeconfig that is missing": {[]string{"check", "--kubeconfig=" + filepath.Join(t.TempDir(), "none")}, kubectl.ExitProblem, "", "none: no such file or directory"},
	}
	for name, tc := range tests {
		stdout, stderr, code := run(t, objects, tc.args...)
		if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%s: exit %d, stdout:\n%s\nstderr:\n%s\nwant exit %d, stdout with %q, stderr with %q", name, code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
}

// TestJSONFieldNames: the field names scripts read are stable; a rename
// fails here.
func TestJSONFieldNames(t *testing.T) {
	objects := []runtime.Object{ns("jobs", optedIn), pod("jobs", "unheld", false)}
	jobs := "--kubeconfig=" + kubeconfig(t, "jobs")
	stdout, stderr, code := run(t, objects, "explain", jobs, "unheld", "-o", "json")
	if code != kubectl.ExitProblem {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	var e map[string]any
	if err := json.Unmarshal([]byte(stdout), &e); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	p := e["pods"].([]any)[0].(map[string]any)
	wantKeys(t, "pod", p, "namespace", "name", "verdict", "optIn", "proxy", "hold", "decision", "apps", "next", "events", "problems", "checks")
	wantKeys(t, "optIn", p["optIn"], "optedIn", "source", "webhook", "bridge", "text")
	wantKeys(t, "hold", p["hold"], "present", "cause", "text")
	wantKeys(t, "decision", p["decision"], "outcome", "reason", "text")
	wantKeys(t, "app", p["apps"].([]any)[0], "name", "state", "restarts", "text")
	if p["verdict"] != "problem" || p["proxy"] != "classic" || p["hold"].(map[string]any)["cause"] != "webhook-missing" {
		t.Errorf("verdict %v, proxy %v, hold %v", p["verdict"], p["proxy"], p["hold"])
	}

	stdout, _, _ = run(t, objects, "check", jobs, "-o", "json")
	var c map[string]any
	if err := json.Unmarshal([]byte(stdout), &c); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	wantKeys(t, "check", c, "shape", "ok", "items")
	wantKeys(t, "item", c["items"].([]any)[0], "name", "status", "message", "command")
}

func wantKeys(t *testing.T, what string, v any, keys ...string) {
	t.Helper()
	m, _ := v.(map[string]any)
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(keys)
	if !slices.Equal(got, keys) {
		t.Errorf("%s has fields %v, want %v", what, got, keys)
	}
}

// TestTextEscapesWhatTheClusterWrote: text a tenant or the cluster wrote
// reaches the terminal as text, in explain's report (an Event message
// holding a quit command's stderr, listed and quoted in a problem) and in
// check's (a value of config-istio-aux), never as the control sequences
// it holds (issue 43: a window title and a cleared screen).
func TestTextEscapesWhatTheClusterWrote(t *testing.T) {
	const hostile = "\x1b]0;owned\x07\x1b[2J\u009b1;1H\u202eaw\nstderr line 2"
	const shown = `\x1b]0;owned\x07\x1b[2J\u009b1;1H\u202eaw\nstderr line 2`
	failed := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "held.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "jobs", Name: "held"},
		Reason:         names.ReasonProxyQuitFailed, Type: corev1.EventTypeWarning, Count: 1,
		Message:             "Quitting istio-proxy failed (will NOT retry): " + hostile,
		Source:              corev1.EventSource{Component: names.SourceProxyQuit},
		ReportingController: names.SourceProxyQuit,
		LastTimestamp:       metav1.Now()}
	config := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: names.DefaultNamespace, Name: names.ConfigMap},
		Data: map[string]string{"nats-url": "nats://other:4222/" + hostile}}
	objects := []runtime.Object{ns("jobs", optedIn), pod("jobs", "held", true), failed, config}
	jobs := "--kubeconfig=" + kubeconfig(t, "jobs")
	for _, args := range [][]string{{"explain", jobs, "held"}, {"check", jobs}} {
		stdout, stderr, _ := run(t, objects, args...)
		if i := strings.IndexFunc(stdout, func(r rune) bool { return r != '\n' && unprintableForTest(r) }); i >= 0 {
			t.Errorf("%s printed %q at byte %d:\n%s", args[0], stdout[i:min(i+8, len(stdout))], i, stdout)
		}
		if !strings.Contains(stdout, shown) {
			t.Errorf("%s did not show the text escaped (%s):\n%s\nstderr: %s", args[0], shown, stdout, stderr)
		}
	}
}

// unprintableForTest is what a terminal must not be sent from the cluster:
// a control or format character, or a byte that is not UTF-8.
func unprintableForTest(r rune) bool {
	return r == utf8.RuneError || unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}
