package decision_test

import (
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// States a container can be in, as the kubelet reports them.
var (
	running = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	backOff = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	noState = corev1.ContainerState{} // status present, state not reported yet
	exit    = func(code int32) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}
	}
	always = corev1.ContainerRestartPolicyAlways
)

// c is one container of a test pod: its name and, unless absent, its state.
type c struct {
	name   string
	state  corev1.ContainerState
	absent bool // no status at all for it
}

// pod builds a pod from containers (in spec order) and init containers.
func pod(policy corev1.RestartPolicy, containers []c, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec:       corev1.PodSpec{RestartPolicy: policy},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, ct := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: ct.name})
		if !ct.absent {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: ct.name, State: ct.state})
		}
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func proxy(s corev1.ContainerState) c { return c{name: "istio-proxy", state: s} }
func app(s corev1.ContainerState) c   { return c{name: "app", state: s} }

func phase(ph corev1.PodPhase) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func annotate(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func deleting(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }

// initContainer adds an init container with its state (restartPolicy
// Always makes it a native sidecar).
func initContainer(name string, policy *corev1.ContainerRestartPolicy, s corev1.ContainerState) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name, RestartPolicy: policy})
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: name, State: s})
	}
}

// validation adds Istio CNI's istio-validation init container in state s,
// and a last state that ended with code last (none when 0).
func validation(s corev1.ContainerState, last int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: keys.ValidationContainer})
		st := corev1.ContainerStatus{Name: keys.ValidationContainer, State: s}
		if last != 0 {
			st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: last}
		}
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, st)
	}
}

const (
	never     = corev1.RestartPolicyNever
	onFailure = corev1.RestartPolicyOnFailure
)

func TestDecide(t *testing.T) {
	ignore, wait, quit, replace := decision.Ignore, decision.Wait, decision.Quit, decision.Replace
	tests := []struct {
		name string
		pod  *corev1.Pod
		opts decision.Options
		want decision.Decision
	}{
		// Row: no classic istio-proxy container; or native sidecar.
		{"no proxy at all", pod(never, []c{app(exit(0))}), decision.Options{}, decision.Decision{ignore, decision.ReasonNoProxy}},
		{"no containers at all", pod(never, nil), decision.Options{}, decision.Decision{ignore, decision.ReasonNoProxy}},
		{"proxy only as a plain init container", pod(never, []c{app(exit(0))}, initContainer("istio-proxy", nil, exit(0))), decision.Options{}, decision.Decision{ignore, decision.ReasonNoProxy}},
		{"native sidecar, app done", pod(never, []c{app(exit(0))}, initContainer("istio-proxy", &always, running)), decision.Options{}, decision.Decision{ignore, decision.ReasonNativeSidecar}},
		{"native sidecar, app running", pod(onFailure, []c{app(running)}, initContainer("istio-proxy", &always, running)), decision.Options{}, decision.Decision{ignore, decision.ReasonNativeSidecar}},
		{"native sidecar wins over a classic one", pod(never, []c{proxy(running), app(exit(0))}, initContainer("istio-proxy", &always, running)), decision.Options{}, decision.Decision{ignore, decision.ReasonNativeSidecar}},
		{"proxy by another name is not a proxy", pod(never, []c{{name: "istio-proxy-2", state: running}, app(exit(0))}), decision.Options{}, decision.Decision{ignore, decision.ReasonNoProxy}},

		// Row: deletionTimestamp set, or phase Succeeded/Failed.
		{"being deleted, apps done", pod(never, []c{proxy(running), app(exit(0))}, deleting), decision.Options{}, decision.Decision{ignore, decision.ReasonDeleting}},
		{"phase Succeeded", pod(never, []c{proxy(running), app(exit(0))}, phase(corev1.PodSucceeded)), decision.Options{}, decision.Decision{ignore, decision.ReasonFinished}},
		{"phase Failed", pod(never, []c{proxy(exit(0)), app(exit(1))}, phase(corev1.PodFailed)), decision.Options{}, decision.Decision{ignore, decision.ReasonFinished}},

		// Row: istio-proxy already terminated.
		{"proxy exited 0", pod(never, []c{proxy(exit(0)), app(exit(0))}), decision.Options{}, decision.Decision{ignore, decision.ReasonProxyDone}},
		{"proxy crashed, app running", pod(never, []c{proxy(exit(137)), app(running)}), decision.Options{}, decision.Decision{ignore, decision.ReasonProxyDone}},

		// Row: restartPolicy Always (explicit, or empty: the API server's default).
		{"Always, app exited", pod(corev1.RestartPolicyAlways, []c{proxy(running), app(exit(0))}), decision.Options{}, decision.Decision{ignore, decision.ReasonRestartAlways}},
		{"empty policy, app exited", pod("", []c{proxy(running), app(exit(0))}), decision.Options{}, decision.Decision{ignore, decision.ReasonRestartAlways}},
		{"unknown policy", pod("Sometimes", []c{proxy(running), app(exit(0))}), decision.Options{}, decision.Decision{ignore, decision.ReasonRestartAlways}},

		// Row: any app not yet terminated.
		{"app running", pod(never, []c{proxy(running), app(running)}), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"app waiting", pod(never, []c{proxy(running), app(waiting)}), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"app in back-off between OnFailure attempts", pod(onFailure, []c{proxy(running), app(backOff)}), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"app status without a state", pod(never, []c{proxy(running), app(noState)}), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"app status missing", pod(never, []c{proxy(running), {name: "app", absent: true}}), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"no statuses at all (just scheduled)", pod(never, []c{{name: "istio-proxy", absent: true}, {name: "app", absent: true}}, phase(corev1.PodPending)), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"proxy status missing, app done", pod(never, []c{{name: "istio-proxy", absent: true}, app(exit(0))}), decision.Options{}, decision.Decision{quit, decision.ReasonAppsDone}},
		{"init container running, apps initializing", pod(never, []c{proxy(waiting), app(waiting)}, initContainer("istio-init", nil, running), phase(corev1.PodPending)), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"init container done, proxy starting (hold)", pod(never, []c{proxy(running), app(waiting)}, initContainer("istio-init", nil, exit(0))), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"one of two apps still running", pod(never, []c{proxy(running), {name: "a", state: exit(0)}, {name: "b", state: running}}), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"first app running, second failed (OnFailure)", pod(onFailure, []c{proxy(running), {name: "a", state: running}, {name: "b", state: exit(1)}}), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},

		// Rows: all apps terminated.
		{"Never, app exit 0", pod(never, []c{proxy(running), app(exit(0))}), decision.Options{}, decision.Decision{quit, decision.ReasonAppsDone}},
		{"Never, app exit 1", pod(never, []c{proxy(running), app(exit(1))}), decision.Options{}, decision.Decision{quit, decision.ReasonAppsDone}},
		{"OnFailure, app exit 0", pod(onFailure, []c{proxy(running), app(exit(0))}), decision.Options{}, decision.Decision{quit, decision.ReasonAppsDone}},
		{"OnFailure, app exit 2: will restart", pod(onFailure, []c{proxy(running), app(exit(2))}), decision.Options{}, decision.Decision{wait, decision.ReasonAppWillRestart}},
		{"OnFailure, one of two apps failed", pod(onFailure, []c{proxy(running), {name: "a", state: exit(0)}, {name: "b", state: exit(1)}}), decision.Options{}, decision.Decision{wait, decision.ReasonAppWillRestart}},
		{"Never, two apps with different codes", pod(never, []c{proxy(running), {name: "a", state: exit(0)}, {name: "b", state: exit(3)}}), decision.Options{}, decision.Decision{quit, decision.ReasonAppsDone}},
		{"proxy listed last", pod(never, []c{app(exit(0)), proxy(running)}), decision.Options{}, decision.Decision{quit, decision.ReasonAppsDone}},
		{"proxy not ready yet but running", pod(never, []c{proxy(waiting), app(exit(0))}), decision.Options{}, decision.Decision{quit, decision.ReasonAppsDone}},

		// Extra sidecars: by option, by annotation, both; never counted as apps.
		{"unlisted sidecar running is an app", pod(never, []c{proxy(running), app(exit(0)), {name: "vault-agent", state: running}}), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"sidecar by option", pod(never, []c{proxy(running), app(exit(0)), {name: "vault-agent", state: running}}), decision.Options{ExtraSidecars: []string{"vault-agent"}}, decision.Decision{quit, decision.ReasonAppsDone}},
		{"sidecar by annotation", pod(never, []c{proxy(running), app(exit(0)), {name: "vault-agent", state: running}}, annotate(keys.AnnotationSidecars, "vault-agent")), decision.Options{}, decision.Decision{quit, decision.ReasonAppsDone}},
		{"sidecars by annotation with blanks", pod(never, []c{proxy(running), app(exit(0)), {name: "vault-agent", state: running}, {name: "fluent-bit", state: running}}, annotate(keys.AnnotationSidecars, " vault-agent , ,fluent-bit ")), decision.Options{}, decision.Decision{quit, decision.ReasonAppsDone}},
		{"sidecars by option and annotation add up", pod(never, []c{proxy(running), app(exit(0)), {name: "vault-agent", state: running}, {name: "fluent-bit", state: running}}, annotate(keys.AnnotationSidecars, "fluent-bit")), decision.Options{ExtraSidecars: []string{"vault-agent"}}, decision.Decision{quit, decision.ReasonAppsDone}},
		{"a failed sidecar does not hold OnFailure back", pod(onFailure, []c{proxy(running), app(exit(0)), {name: "vault-agent", state: exit(1)}}), decision.Options{ExtraSidecars: []string{"vault-agent"}}, decision.Decision{quit, decision.ReasonAppsDone}},
		{"only sidecars: no apps", pod(never, []c{proxy(running), {name: "vault-agent", state: exit(0)}}), decision.Options{ExtraSidecars: []string{"vault-agent"}}, decision.Decision{ignore, decision.ReasonNoApps}},
		{"only the proxy: no apps", pod(never, []c{proxy(running)}), decision.Options{}, decision.Decision{ignore, decision.ReasonNoApps}},
		// Istio CNI's start race: istio-validation found no traffic capture.
		{"CNI race, OnFailure, validation failed", pod(onFailure, []c{proxy(waiting), app(waiting)}, validation(exit(126), 0), phase(corev1.PodPending)), decision.Options{}, decision.Decision{replace, decision.ReasonCNIRace}},
		{"CNI race, OnFailure, in back-off after the failure", pod(onFailure, []c{proxy(waiting), app(waiting)}, validation(backOff, 126), phase(corev1.PodPending)), decision.Options{}, decision.Decision{replace, decision.ReasonCNIRace}},
		{"CNI race, native proxy too", pod(onFailure, []c{app(waiting)}, validation(backOff, 126), initContainer("istio-proxy", &always, waiting), phase(corev1.PodPending)), decision.Options{}, decision.Decision{replace, decision.ReasonCNIRace}},
		{"CNI race, validation running again: maybe repaired", pod(onFailure, []c{proxy(waiting), app(waiting)}, validation(running, 126), phase(corev1.PodPending)), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"CNI race, validation passed after a repair", pod(onFailure, []c{proxy(running), app(running)}, validation(exit(0), 126)), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"CNI race under Never: the kubelet fails the pod", pod(never, []c{proxy(waiting), app(waiting)}, validation(exit(126), 0), phase(corev1.PodPending)), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"CNI race, pod already deleting", pod(onFailure, []c{proxy(waiting), app(waiting)}, validation(exit(126), 0), phase(corev1.PodPending), deleting), decision.Options{}, decision.Decision{ignore, decision.ReasonDeleting}},
		{"validation failed otherwise", pod(onFailure, []c{proxy(waiting), app(waiting)}, validation(backOff, 1), phase(corev1.PodPending)), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},
		{"another init container exited 126", pod(onFailure, []c{proxy(waiting), app(waiting)}, initContainer("setup", nil, exit(126)), phase(corev1.PodPending)), decision.Options{}, decision.Decision{wait, decision.ReasonAppsRunning}},

		{"annotation naming the app makes it a sidecar", pod(never, []c{proxy(running), app(running)}, annotate(keys.AnnotationSidecars, "app")), decision.Options{}, decision.Decision{ignore, decision.ReasonNoApps}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := slim.Of(tc.pod)
			before := slim.Of(tc.pod)
			got := decision.Decide(p, tc.opts)
			if got != tc.want {
				t.Errorf("Decide = %v (%q), want %v (%q)", got.Outcome, got.Reason, tc.want.Outcome, tc.want.Reason)
			}
			if !equality.Semantic.DeepEqual(before, p) {
				t.Error("Decide mutated its pod")
			}
		})
	}
}

// TestDecideMatrix crosses restart policies, app exit codes and proxy
// states for a single-app pod. Each expected outcome is written out, one row
// per policy, so a change to the table in docs/design.md shows up here.
func TestDecideMatrix(t *testing.T) {
	ignore, wait, quit := decision.Ignore, decision.Wait, decision.Quit
	codes := []int32{0, 1, 2, 137, 143, -1}
	// want[policy][exit==0] with the proxy running.
	want := map[corev1.RestartPolicy][2]decision.Outcome{
		never:                      {quit, quit},
		onFailure:                  {wait, quit},
		corev1.RestartPolicyAlways: {ignore, ignore},
		"":                         {ignore, ignore},
	}
	for policy, byExit := range want {
		for _, code := range codes {
			for _, proxyState := range []corev1.ContainerState{running, waiting, exit(0), exit(code)} {
				name := fmt.Sprintf("%q/exit %d/proxy %s", policy, code, stateName(proxyState))
				t.Run(name, func(t *testing.T) {
					expect := byExit[btoi(code == 0)]
					if proxyState.Terminated != nil {
						expect = ignore // the proxy is done whatever the app did
					}
					got := decision.Decide(slim.Of(pod(policy, []c{proxy(proxyState), app(exit(code))})), decision.Options{})
					if got.Outcome != expect {
						t.Errorf("Decide = %v (%q), want %v", got.Outcome, got.Reason, expect)
					}
				})
			}
			// Whatever the policy and code, an app still running means wait
			// for run-to-completion pods, and the same for a second app.
			t.Run(fmt.Sprintf("%q/exit %d/second app running", policy, code), func(t *testing.T) {
				expect := wait
				if byExit[1] == ignore {
					expect = ignore
				}
				p := pod(policy, []c{proxy(running), app(exit(code)), {name: "second", state: running}})
				if got := decision.Decide(slim.Of(p), decision.Options{}); got.Outcome != expect {
					t.Errorf("Decide = %v (%q), want %v", got.Outcome, got.Reason, expect)
				}
			})
		}
	}
}

func TestOutcomeActs(t *testing.T) {
	for o, want := range map[decision.Outcome]bool{decision.Ignore: false, decision.Wait: false, decision.Quit: true, decision.Replace: true, 42: false} {
		if got := o.Acts(); got != want {
			t.Errorf("%v.Acts() = %v, want %v", o, got, want)
		}
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[decision.Outcome]string{decision.Ignore: "ignore", decision.Wait: "wait", decision.Quit: "quit", decision.Replace: "replace", 42: "unknown"} {
		if got := o.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(o), got, want)
		}
	}
}

func TestHasProxy(t *testing.T) {
	onFail := corev1.ContainerRestartPolicy("OnFailure")
	tests := []struct {
		name                    string
		pod                     *corev1.Pod
		wantClassic, wantNative bool
	}{
		{"classic", pod(never, []c{proxy(running)}), true, false},
		{"native", pod(never, []c{app(running)}, initContainer("istio-proxy", &always, running)), false, true},
		{"init without policy", pod(never, []c{app(running)}, initContainer("istio-proxy", nil, running)), false, false},
		{"init with another policy", pod(never, []c{app(running)}, initContainer("istio-proxy", &onFail, running)), false, false},
		{"another native sidecar", pod(never, []c{app(running)}, initContainer("envoy", &always, running)), false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decision.HasClassicProxy(slim.Of(tc.pod)); got != tc.wantClassic {
				t.Errorf("HasClassicProxy = %v, want %v", got, tc.wantClassic)
			}
			if got := decision.HasNativeProxy(slim.Of(tc.pod)); got != tc.wantNative {
				t.Errorf("HasNativeProxy = %v, want %v", got, tc.wantNative)
			}
		})
	}
}

func BenchmarkDecide(b *testing.B) {
	// A TFJob worker as the function sees it most often: done, proxy running,
	// with an annotation to parse.
	p := pod(onFailure, []c{proxy(running), {name: "tensorflow", state: exit(0)}, {name: "vault-agent", state: running}},
		annotate(keys.AnnotationSidecars, "vault-agent"), initContainer("istio-init", nil, exit(0)))
	opts := decision.Options{ExtraSidecars: []string{"fluent-bit"}}
	sp := slim.Of(p)
	b.ReportAllocs()
	for b.Loop() {
		if decision.Decide(sp, opts).Outcome != decision.Quit {
			b.Fatal("want quit")
		}
	}
}

func stateName(s corev1.ContainerState) string {
	switch {
	case s.Terminated != nil:
		return fmt.Sprintf("exited %d", s.Terminated.ExitCode)
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting"
	}
	return "unknown"
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSidecars: istio-proxy, the configured names and the pod's annotated
// ones are not apps.
func TestSidecars(t *testing.T) {
	p := &slim.Pod{Meta: slim.Meta{Annotations: slim.Kept{"istio-aux.dev/sidecars": "vault-agent, fluent-bit"}}}
	got := decision.Sidecars(p, decision.Options{ExtraSidecars: []string{"linkerd-proxy"}})
	want := map[string]struct{}{"istio-proxy": {}, "vault-agent": {}, "fluent-bit": {}, "linkerd-proxy": {}}
	if !maps.Equal(got, want) {
		t.Errorf("Sidecars = %v, want %v", got, want)
	}
}
