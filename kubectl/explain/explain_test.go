package explain_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/istio-aux/istio-aux/kubectl/explain"
)

// want is what a test expects of one pod's explanation. Text fields are
// substrings; problems are matched in order and must all be there.
type want struct {
	verdict  explain.Verdict
	optedIn  bool
	source   string
	webhook  bool
	bridge   bool
	proxy    string
	hold     bool
	cause    string
	outcome  string
	reason   string
	apps     []string
	sidecars []explain.Sidecar
	next     string
	events   []string // reasons, oldest first
	problems []string
	checks   []string
}

// errDenial is the exec policy's refusal of an argv, as the API server words
// it (test/config/exec_policy_test.go checks the wording on a real one),
// reaching the function over WebSocket.
var errDenial = fmt.Errorf("exec: %w", &httpstream.UpgradeFailureError{Cause: apierrors.NewForbidden(schema.GroupResource{Resource: "pods/exec"}, "done",
	errors.New("ValidatingAdmissionPolicy 'istio-aux-proxyquit-exec-command' with binding 'istio-aux-proxyquit-exec-command' denied request: "+
		"istio-aux-proxyquit may run only the quit-command of ConfigMap istio-aux/config-istio-aux: curl -sf -XPOST http://127.0.0.1:15020/quitquitquit"))})

// TestExplain covers every state a user asks about, through the fake
// clientset: what gather.go reads and what Explain makes of it.
func TestExplain(t *testing.T) {
	onFailure, never := corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever
	jobs := namespace("jobs", optedIn, created.Add(-time.Hour))
	quitPod := jobPod("jobs", "quit", never, exited(0, time.Minute), finished)
	deniedPod := jobPod("jobs", "denied", never, exited(0, 30*time.Second))
	forgedPod := jobPod("jobs", "forged", never, exited(0, 30*time.Second))
	tests := map[string]struct {
		objects []runtime.Object
		pod     string // in namespace jobs unless ns/name
		want    want
	}{
		"a waiting OnFailure pod: the kubelet runs its app again": {
			objects: []runtime.Object{jobs, jobPod("jobs", "retry", onFailure, exited(1, 2*time.Second))},
			pod:     "retry",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic",
				hold: true, outcome: "wait", reason: "the kubelet will run an app again",
				apps: []string{"app train exited 1 under the pod's restartPolicy OnFailure: the kubelet will run it again"},
				next: "waiting for the kubelet to run app train (terminated) again"},
		},
		"an app still running, behind an extra sidecar": {
			objects: []runtime.Object{jobs, jobPod("jobs", "running", never, running(), sidecar("vault-agent", running()), sidecar("fluent-bit", running()),
				annotated("istio-aux.dev/sidecars", "fluent-bit"))},
			pod: "running",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic", hold: true,
				outcome: "wait", reason: "apps not terminated yet", apps: []string{"app train is running"},
				sidecars: []explain.Sidecar{{Name: "vault-agent", Where: "config-istio-aux"}, {Name: "fluent-bit", Where: "annotation"}},
				next:     "waiting for app train (running)"},
		},
		"apps done a moment ago: quit within seconds": {
			objects: []runtime.Object{jobs, jobPod("jobs", "done", never, exited(3, 2*time.Second))},
			pod:     "done",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic", hold: true,
				outcome: "quit", reason: "all apps terminated", apps: []string{"app train exited 3 under the pod's restartPolicy Never: it will not run again"},
				next: "istio-aux will quit istio-proxy within seconds"},
		},
		"apps done, the webhook's label missing: found by the sweep": {
			objects: []runtime.Object{jobs, jobPod("jobs", "missed", never, exited(0, 2*time.Minute), unwatched)},
			pod:     "missed",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic", hold: true,
				outcome: "quit", reason: "all apps terminated", apps: []string{"exited 0"}, next: "once its sweep finds this pod",
				checks: []string{"kubectl get pod -n jobs missed -L istio-aux.dev/watched"}},
		},
		"apps done long ago and the proxy still runs: overdue": {
			objects: []runtime.Object{jobs, jobPod("jobs", "overdue", never, exited(0, 5*time.Minute))},
			pod:     "overdue",
			want: want{verdict: explain.VerdictProblem, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic", hold: true,
				outcome: "quit", reason: "all apps terminated", apps: []string{"exited 0"}, next: "should have quit istio-proxy by now",
				problems: []string{"its apps finished 5m0s ago and istio-proxy still runs"}, checks: []string{"kubectl istio-aux check"}},
		},
		"a quit pod: its ProxyQuit Event": {
			objects: []runtime.Object{jobs, quitPod, event(quitPod, "ProxyQuit", "Quit istio-proxy: all apps terminated", 55*time.Second)},
			pod:     "quit",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic", hold: true,
				outcome: "ignore", reason: "pod has finished", apps: []string{"exited 0"},
				next: "istio-proxy has stopped (istio-aux quit it at 2026-11-27T11:59:05Z)", events: []string{"ProxyQuit"}},
		},
		"a pod outside the opt-in": {
			objects: []runtime.Object{namespace("plain", nil, time.Time{}), jobPod("plain", "outside", never, running(), noHold(""))},
			pod:     "plain/outside",
			want: want{verdict: explain.VerdictOutside, source: "none", proxy: "classic", cause: "not-opted-in",
				outcome: "ignore", reason: "not opted in", apps: []string{"app train is running"}, next: "leaves pods outside the opt-in alone"},
		},
		"a pod outside the opt-in whose app is done: stuck for good": {
			objects: []runtime.Object{namespace("plain", nil, time.Time{}), jobPod("plain", "stuck", never, exited(0, time.Hour), noHold(""))},
			pod:     "plain/stuck",
			want: want{verdict: explain.VerdictProblem, source: "none", proxy: "classic", cause: "not-opted-in", outcome: "ignore", reason: "not opted in",
				apps: []string{"exited 0"}, next: "leaves pods outside the opt-in alone", problems: []string{"nothing will quit it: the pod stays Running"}},
		},
		"a pod opted out by its annotation": {
			objects: []runtime.Object{jobs, jobPod("jobs", "out", never, running(), noHold(""), annotated("istio-aux.dev/enabled", "false"))},
			pod:     "out",
			want: want{verdict: explain.VerdictOutside, source: "pod-annotation", webhook: true, bridge: true, proxy: "classic", cause: "not-opted-in",
				outcome: "ignore", reason: "not opted in", apps: []string{"is running"}, next: "outside the opt-in"},
		},
		"admitted without the hold: created before its namespace opted in": {
			objects: []runtime.Object{namespace("late", optedIn, created.Add(time.Minute)), jobPod("late", "early", never, running(), noHold(""))},
			pod:     "late/early",
			want: want{verdict: explain.VerdictProblem, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic",
				cause: "created-before-opt-in", outcome: "wait", reason: "apps not terminated yet", apps: []string{"is running"}, next: "waiting for app train",
				problems: []string{"admitted without the hold (its app may start before its proxy carries traffic): it was likely created before namespace late opted in: " +
					"label istio-aux.dev/enabled was last set at 2026-11-27T11:51:00Z, the pod created at 2026-11-27T11:50:00Z"}},
		},
		"admitted without the hold, the webhook as installed": {
			objects: []runtime.Object{jobs, jobPod("jobs", "nohold", onFailure, running(), noHold(""))},
			pod:     "nohold",
			want: want{verdict: explain.VerdictProblem, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic",
				cause: "webhook-not-called", outcome: "wait", reason: "apps not terminated yet", apps: []string{"is running"}, next: "waiting for app train",
				problems: []string{"With failurePolicy Fail, as now, a call that fails refuses the pod"},
				checks:   []string{"kubectl get mutatingwebhookconfiguration istio-aux-webhook --show-managed-fields -o yaml"}},
		},
		"the user's own false wins": {
			objects: []runtime.Object{jobs, jobPod("jobs", "mine", never, running(), noHold("holdApplicationUntilProxyStarts: false"))},
			pod:     "mine",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic",
				cause: "user-value", outcome: "wait", reason: "apps not terminated yet", apps: []string{"is running"}, next: "waiting for app train"},
		},
		"opted in by its label where the bridge does not look": {
			objects: []runtime.Object{namespace("plain", nil, time.Time{}), jobPod("plain", "alone", never, running(), labelled(optedIn))},
			pod:     "plain/alone",
			want: want{verdict: explain.VerdictProblem, optedIn: true, source: "pod-label", webhook: true, proxy: "classic", hold: true,
				outcome: "wait", reason: "apps not terminated yet", apps: []string{"is running"}, next: "the bridge does not watch this pod",
				problems: []string{"opted in by its pod label istio-aux.dev/enabled"}, checks: []string{"kubectl label namespace plain istio-aux.dev/enabled=pods"}},
		},
		"opted in by its label in a namespace of labelled pods": {
			objects: []runtime.Object{namespace("some", byPods, time.Time{}), jobPod("some", "one", never, running(), labelled(optedIn))},
			pod:     "some/one",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "pod-label", webhook: true, bridge: true, proxy: "classic", hold: true,
				outcome: "wait", reason: "apps not terminated yet", apps: []string{"is running"}, next: "waiting for app train"},
		},
		"opted in by annotation alone: neither the webhook nor the bridge sees it": {
			objects: []runtime.Object{namespace("some", byPods, time.Time{}), jobPod("some", "annotated", never, running(), noHold(""), annotated("istio-aux.dev/enabled", "true"))},
			pod:     "some/annotated",
			want: want{verdict: explain.VerdictProblem, optedIn: true, source: "pod-annotation", proxy: "classic", cause: "not-reached",
				outcome: "wait", reason: "apps not terminated yet", apps: []string{"is running"}, next: "the bridge does not watch this pod",
				problems: []string{"but the bridge does not watch it", "which the webhook's selectors cannot see"},
				checks:   []string{"kubectl label pod -n some annotated istio-aux.dev/enabled=true"}},
		},
		"a quit denied by the exec policy": {
			objects: []runtime.Object{jobs, deniedPod, event(deniedPod, "ProxyQuitFailed", recorded(t, errDenial), 20*time.Second)},
			pod:     "denied",
			want: want{verdict: explain.VerdictProblem, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic", hold: true,
				outcome: "quit", reason: "all apps terminated", apps: []string{"exited 0"}, next: "nothing until the pod changes: istio-aux's quit failed for good",
				events:   []string{"ProxyQuitFailed"},
				problems: []string{"istio-aux could not quit istio-proxy at 2026-11-27T11:59:40Z: the exec policy istio-aux-proxyquit-exec-command allows only the quit-command of ConfigMap istio-aux/config-istio-aux"},
				checks:   []string{"kubectl -n istio-aux get configmap config-istio-aux -o yaml", "kubectl get validatingadmissionpolicy istio-aux-proxyquit-exec istio-aux-proxyquit-exec-command -o yaml"}},
		},
		"a ProxyQuit another writer put on a quit pod is not istio-aux's": {
			objects: []runtime.Object{jobs, quitPod, forged(event(quitPod, "ProxyQuit", "Quit istio-proxy: all apps terminated", 55*time.Second), "tenant", "tenant")},
			pod:     "quit",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic", hold: true,
				outcome: "ignore", reason: "pod has finished", apps: []string{"exited 0"}, next: "istio-proxy has stopped", events: nil},
		},
		"a ProxyQuitFailed another writer put on a pod is no failure of istio-aux's": {
			objects: []runtime.Object{jobs, forgedPod,
				forged(event(forgedPod, "ProxyQuit", "Quit istio-proxy", 25*time.Second), "", "kubelet"),
				forged(event(forgedPod, "ProxyQuitFailed", "Quitting istio-proxy failed for good (denied)", 15*time.Second), "tenant", "istio-aux-proxyquit"),
				forged(event(forgedPod, "ProxyQuitFailed", recorded(t, errDenial), 5*time.Second), "tenant", "")},
			pod: "forged",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic", hold: true,
				outcome: "quit", reason: "all apps terminated", apps: []string{"exited 0"}, next: "istio-aux will quit istio-proxy within seconds", events: nil},
		},
		"the function's Event told by its reportingController alone, as events.k8s.io writes it": {
			objects: []runtime.Object{jobs, quitPod, forged(event(quitPod, "ProxyQuit", "Quit istio-proxy: all apps terminated", 55*time.Second), "istio-aux-proxyquit", "")},
			pod:     "quit",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic", hold: true,
				outcome: "ignore", reason: "pod has finished", apps: []string{"exited 0"},
				next: "istio-proxy has stopped (istio-aux quit it at 2026-11-27T11:59:05Z)", events: []string{"ProxyQuit"}},
		},
		"the function's Event told by its source.component alone, as functions before this one wrote it": {
			objects: []runtime.Object{jobs, quitPod, forged(event(quitPod, "ProxyQuit", "Quit istio-proxy: all apps terminated", 55*time.Second), "", "istio-aux-proxyquit")},
			pod:     "quit",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "classic", hold: true,
				outcome: "ignore", reason: "pod has finished", apps: []string{"exited 0"},
				next: "istio-proxy has stopped (istio-aux quit it at 2026-11-27T11:59:05Z)", events: []string{"ProxyQuit"}},
		},
		"a native-sidecar pod: the kubelet's to stop": {
			objects: []runtime.Object{jobs, jobPod("jobs", "native", never, exited(0, time.Second), native(running()))},
			pod:     "native",
			want: want{verdict: explain.VerdictOK, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "native", hold: true,
				outcome: "ignore", reason: "istio-proxy is a native sidecar", apps: []string{"exited 0"}, next: "the kubelet stops a native sidecar"},
		},
		"no Istio sidecar at all": {
			objects: []runtime.Object{jobs, jobPod("jobs", "bare", never, running(), noProxy)},
			pod:     "bare",
			want: want{verdict: explain.VerdictOutside, optedIn: true, source: "namespace-label", webhook: true, bridge: true, proxy: "none", cause: "no-proxy",
				outcome: "ignore", reason: "no classic istio-proxy container", apps: []string{"is running"}, next: "nothing to do with this pod"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objects := append(install(map[string]string{"sidecars": "vault-agent"}), tc.objects...)
			ns, pod := "jobs", tc.pod
			if before, after, ok := strings.Cut(tc.pod, "/"); ok {
				ns, pod = before, after
			}
			src := explain.Source{Client: fake.NewClientset(objects...), SystemNamespace: sys, Now: func() time.Time { return now }}
			r, err := src.Report(context.Background(), explain.Selection{Namespace: ns, Names: []string{pod}})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Pods) != 1 {
				t.Fatalf("%d pods explained, want 1", len(r.Pods))
			}
			check(t, r.Pods[0], tc.want)
		})
	}
}

func check(t *testing.T, got explain.Pod, w want) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("explanation: %+v", got)
		}
	}()
	if got.Verdict != w.verdict || got.OptIn.OptedIn != w.optedIn || got.OptIn.Source != w.source || got.OptIn.Webhook != w.webhook ||
		got.OptIn.Bridge != w.bridge || got.Proxy != w.proxy {
		t.Errorf("verdict %s, opt-in %+v, proxy %s; want %s, opted in %v by %s (webhook %v, bridge %v), proxy %s",
			got.Verdict, got.OptIn, got.Proxy, w.verdict, w.optedIn, w.source, w.webhook, w.bridge, w.proxy)
	}
	if got.Hold.Present != w.hold || got.Hold.Cause != w.cause {
		t.Errorf("hold %+v; want present %v, cause %q", got.Hold, w.hold, w.cause)
	}
	if got.Decision.Outcome != w.outcome || !strings.Contains(got.Decision.Reason, w.reason) {
		t.Errorf("decision %+v; want %s, %q", got.Decision, w.outcome, w.reason)
	}
	if len(got.Apps) != len(w.apps) {
		t.Errorf("apps %+v; want %d", got.Apps, len(w.apps))
	}
	for i := range min(len(got.Apps), len(w.apps)) {
		if !strings.Contains(got.Apps[i].Text, w.apps[i]) {
			t.Errorf("app %d: %q, want it to say %q", i, got.Apps[i].Text, w.apps[i])
		}
	}
	if fmt.Sprint(got.Sidecars) != fmt.Sprint(w.sidecars) {
		t.Errorf("sidecars %v, want %v", got.Sidecars, w.sidecars)
	}
	if !strings.Contains(got.Next, w.next) {
		t.Errorf("next %q, want it to say %q", got.Next, w.next)
	}
	var reasons []string
	for _, e := range got.Events {
		reasons = append(reasons, e.Reason)
	}
	if fmt.Sprint(reasons) != fmt.Sprint(w.events) {
		t.Errorf("events %v, want %v", reasons, w.events)
	}
	if len(got.Problems) != len(w.problems) {
		t.Errorf("problems %q, want %d", got.Problems, len(w.problems))
	}
	for i := range min(len(got.Problems), len(w.problems)) {
		if !strings.Contains(got.Problems[i], w.problems[i]) {
			t.Errorf("problem %d: %q, want it to say %q", i, got.Problems[i], w.problems[i])
		}
	}
	for _, c := range w.checks {
		if !containsText(got.Checks, c) {
			t.Errorf("checks %q, want %q", got.Checks, c)
		}
	}
}

func containsText(list []string, s string) bool {
	for _, x := range list {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}
