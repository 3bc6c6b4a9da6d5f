package proxyquit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
	"github.com/istio-aux/istio-aux/test/record"
)

// testdata holds events recorded from real runs by hack/record.sh: one
// folder per scenario, files NNN-<pod>-<state>.json in delivery order.
const testdata = "../../test/testdata"

// expect is what must happen for one event, given the state its pod shows.
type expect struct {
	outcome Outcome
	quit    bool // the quit command is exec'd in the event's pod
}

var (
	wait    = expect{outcome: OutcomeWait}
	quit    = expect{outcome: OutcomeQuit, quit: true}
	ignored = expect{outcome: OutcomeIgnored}
)

// replayScenario is what a recording must contain and what Handle must do
// with each of its events. Expectations are per event, keyed by the state
// in the file's name (which the test checks against the pod in the file),
// because a re-recording may order or repeat events differently.
type replayScenario struct {
	apiServerSource bool // ApiServerSource events rather than the bridge's
	pods            []string
	// states: every state the recording may hold, and what must happen at
	// each event in that state. A state missing here fails the test.
	states map[string]expect
	// sequence: states every pod must pass through, in this order.
	sequence []string
	// quitsPerPod: how many events of each pod must exec the quit.
	quitsPerPod int
	// check asserts what the scenario claims about the recorded pods.
	check func(t *testing.T, evs []recorded)
}

// scenarios are written from the decision table (docs/design.md), not copied
// from the function's output.
var scenarios = map[string]replayScenario{
	"tfjob-mnist-2-workers": {
		pods: []string{"mnist-worker-0", "mnist-worker-1"},
		states: map[string]expect{
			record.StatePending: wait, record.StateInit: wait, record.StatePodInitializing: wait,
			"1of2": wait, "2of2": wait,
			// The app exited 0 and the proxy still runs: quit, once per worker.
			record.StateAppsDone: quit,
		},
		sequence:    []string{record.StateInit, record.StatePodInitializing, "1of2", "2of2", record.StateAppsDone},
		quitsPerPod: 1,
		check:       checkMnist,
	},
	"apiserversource": {
		apiServerSource: true,
		pods:            []string{"mnist-worker-0", "mnist-worker-1"},
		states: map[string]expect{
			record.StatePending: wait, record.StateInit: wait, record.StatePodInitializing: wait,
			"1of2": wait, "2of2": wait,
			// Twice per pod: the state itself, then the stub pilot-agent's
			// annotation; a quit at each is what a real function does too.
			record.StateAppsDone:    quit,
			record.StateProxyExited: ignored, record.StateSucceeded: ignored,
		},
		sequence: []string{record.StatePending, record.StateInit, record.StatePodInitializing, "1of2", "2of2",
			record.StateAppsDone, record.StateProxyExited, record.StateSucceeded},
		check: checkFullPods,
	},
	"onfailure-retry": {
		pods: []string{"download"},
		states: map[string]expect{
			record.StatePending: wait, "2of2": wait,
			// The kubelet will restart the app: quitting now would leave the
			// retry without a network (the reference implementation's bug).
			record.StateAppFailed: wait,
			"2of2-restart1":       wait,
			record.StateAppsDone:  quit,
		},
		sequence:    []string{"2of2", record.StateAppFailed, "2of2-restart1", record.StateAppsDone},
		quitsPerPod: 1,
		check:       checkOnFailure,
	},
	"never-failing-app": {
		pods:        []string{"migrate-db"},
		states:      map[string]expect{record.StatePending: wait, "2of2": wait, record.StateAppsDone: quit},
		sequence:    []string{"2of2", record.StateAppsDone},
		quitsPerPod: 1,
		check:       checkNeverFailing,
	},
	"two-apps": {
		pods: []string{"report"},
		states: map[string]expect{
			record.StatePending: wait, "3of3": wait,
			"trainer-exited0":    wait, // uploader still runs
			record.StateAppsDone: quit,
		},
		sequence:    []string{"3of3", "trainer-exited0", record.StateAppsDone},
		quitsPerPod: 1,
		check:       checkTwoApps,
	},
	"native-sidecar": {
		apiServerSource: true,
		pods:            []string{"native"},
		// The kubelet stops a native sidecar itself: never exec.
		states: map[string]expect{
			record.StatePending: ignored, "1of1": ignored, record.StateAppsDone: ignored,
			record.StateProxyExited: ignored, record.StateSucceeded: ignored,
		},
		sequence: []string{"1of1", record.StateAppsDone, record.StateProxyExited, record.StateSucceeded},
		check:    checkNative,
	},
	// Container-level restart policy and rules, recorded on the real node.
	"container-onfailure-retry": {
		pods: []string{"retry"},
		states: map[string]expect{
			record.StatePending: wait, record.StatePodInitializing: wait, "1of2": wait,
			// Pod Never, but the app's own OnFailure: the kubelet runs it
			// again, so its proxy stays.
			record.StateAppFailed: wait, "1of2-restart1": wait,
			record.StateAppsDone: quit,
		},
		sequence:    []string{"1of2", record.StateAppFailed, "1of2-restart1", record.StateAppsDone},
		quitsPerPod: 1,
		check:       checkContainerPolicy(corev1.RestartPolicyNever, corev1.ContainerRestartPolicyOnFailure, 1, 1),
	},
	"restart-rule-exit-42": {
		pods: []string{"rule"},
		states: map[string]expect{
			record.StatePending: wait, record.StatePodInitializing: wait, "1of2": wait,
			// Exit 42 matches the app's Restart rule: the kubelet runs it
			// again, so its proxy stays.
			record.StateAppFailed: wait, "1of2-restart1": wait,
			record.StateAppsDone: quit,
		},
		sequence:    []string{"1of2", record.StateAppFailed, "1of2-restart1", record.StateAppsDone},
		quitsPerPod: 1,
		check:       checkContainerPolicy(corev1.RestartPolicyNever, corev1.ContainerRestartPolicyNever, 42, 1),
	},
	"container-never-failure": {
		pods: []string{"once"},
		states: map[string]expect{
			record.StatePending: wait, record.StatePodInitializing: wait, "1of2": wait,
			// Pod OnFailure, but the app's own Never: the kubelet will not
			// run it again, so the proxy is quit and the pod fails, instead
			// of istio-aux waiting for a retry that never comes.
			record.StateAppsDone: quit,
		},
		sequence:    []string{"1of2", record.StateAppsDone},
		quitsPerPod: 1,
		check:       checkContainerPolicy(corev1.RestartPolicyOnFailure, corev1.ContainerRestartPolicyNever, 1, 0),
	},
	"deleted-mid-run": {
		apiServerSource: true,
		pods:            []string{"sleeper"},
		states: map[string]expect{
			record.StatePending: wait, "2of2": wait,
			record.StateDeleting: ignored, record.StateDeleted: ignored,
		},
		sequence: []string{"2of2", record.StateDeleting, record.StateDeleted},
		check:    checkDeletedMidRun,
	},
}

// recorded is one event file.
type recorded struct {
	file  string
	state string // from the file name
	event cloudevents.Event
	pod   *slim.Pod
	live  *corev1.Pod // the same data read as a v1.Pod: the pod the fake API server serves
}

func loadScenario(t testing.TB, dir string) []recorded {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testdata, dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("scenario %s has no recorded events (run hack/record.sh)", dir)
	}
	slices.Sort(files)
	var out []recorded
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var e cloudevents.Event
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("%s: not a structured-mode CloudEvent: %v", f, err)
		}
		pod, err := podevent.Decode(e)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		name := filepath.Base(f)
		state, ok := record.StateFromFileName(name, pod.Name)
		if !ok {
			t.Fatalf("%s: name is not NNN-%s-<state>.json", f, pod.Name)
		}
		// The name must say what the pod shows: expectations key on it.
		if got := record.State(pod, e.Type()); got != state {
			t.Fatalf("%s: named %q but its pod is %q", f, state, got)
		}
		live := &corev1.Pod{}
		if err := json.Unmarshal(e.Data(), live); err != nil {
			t.Fatalf("%s: data is not a v1.Pod: %v", f, err)
		}
		out = append(out, recorded{file: name, state: state, event: e, pod: pod, live: live})
	}
	return out
}

func TestReplayCoversEveryScenario(t *testing.T) {
	dirs, err := os.ReadDir(testdata)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, d := range dirs {
		if d.IsDir() {
			found = append(found, d.Name())
			if _, err := os.Stat(filepath.Join(testdata, d.Name(), "SOURCE")); err != nil {
				t.Errorf("scenario folder %s has no SOURCE file", d.Name())
			}
		}
	}
	for _, d := range found {
		if _, ok := scenarios[d]; !ok {
			t.Errorf("scenario folder %s has no expectations in replay_test.go", d)
		}
	}
	for name := range scenarios {
		if !slices.Contains(found, name) {
			t.Errorf("expected scenario %s is missing from %s", name, testdata)
		}
	}
}

// TestRecordingsShowTheScenario checks that each recording contains what
// its scenario claims, before any replay.
func TestRecordingsShowTheScenario(t *testing.T) {
	for name, sc := range scenarios {
		t.Run(name, func(t *testing.T) {
			evs := loadScenario(t, name)
			byPod := map[string][]string{}
			for _, ev := range evs {
				if !slices.Contains(sc.pods, ev.pod.Name) {
					t.Errorf("%s: pod %s is not in the scenario", ev.file, ev.pod.Name)
				}
				if _, ok := sc.states[ev.state]; !ok {
					t.Errorf("%s: no expectation for state %q", ev.file, ev.state)
				}
				if ev.event.Source() == "" || ev.event.Subject() != podevent.Subject(ev.pod.Namespace, ev.pod.Name) {
					t.Errorf("%s: source %q subject %q", ev.file, ev.event.Source(), ev.event.Subject())
				}
				isAPIServer := strings.HasPrefix(ev.event.Type(), "dev.knative.apiserver.resource.")
				if isAPIServer != sc.apiServerSource || (!isAPIServer && ev.event.Type() != podevent.TypePodUpdated) {
					t.Errorf("%s: type %s in a scenario recorded as apiServerSource=%v", ev.file, ev.event.Type(), sc.apiServerSource)
				}
				byPod[ev.pod.Name] = append(byPod[ev.pod.Name], ev.state)
			}
			for _, p := range sc.pods {
				if !isSubsequence(sc.sequence, byPod[p]) {
					t.Errorf("pod %s went through %v, want %v in this order", p, byPod[p], sc.sequence)
				}
			}
			if sc.check != nil {
				sc.check(t, evs)
			}
		})
	}
}

// TestReplay feeds each scenario, in order, through Handle against a fake
// API whose live pod is the event's pod, in an opted-in namespace.
func TestReplay(t *testing.T) {
	for name, sc := range scenarios {
		t.Run(name, func(t *testing.T) {
			evs := loadScenario(t, name)
			h := newHarness(t, DefaultConfig(), optedIn)
			quits := map[string]int{}
			for _, ev := range evs {
				want, ok := sc.states[ev.state]
				if !ok {
					t.Fatalf("%s: no expectation for state %q", ev.file, ev.state)
				}
				h.makeLive(t, ev.live, ev.event.Type() == podevent.TypeAPIServerDelete)
				before := len(h.exec.Calls())
				counted := h.count(ev.event.Type(), want.outcome)

				res := h.fn.Handle(context.Background(), ev.event)

				if code := codeOf(t, res); code != 200 {
					t.Errorf("%s: code %d (%v), want 200", ev.file, code, res)
				}
				if got := h.count(ev.event.Type(), want.outcome); got != counted+1 {
					t.Errorf("%s: outcome %q not counted (%v)", ev.file, want.outcome, res)
				}
				calls := h.exec.Calls()[before:]
				var wantCalls []execCall
				if want.quit {
					wantCalls = []execCall{{ev.pod.Namespace, ev.pod.Name, "istio-proxy", defaultArgv}}
					quits[ev.pod.Name]++
				}
				if !slices.EqualFunc(calls, wantCalls, execCallEqual) {
					t.Errorf("%s: exec calls %v, want %v", ev.file, calls, wantCalls)
				}
				// A quit leaves the pod its one ProxyQuit Event: the
				// first quit writes it, a second finds it there.
				kube := h.events()
				quitEvents := h.quitEvents()[ev.pod.Name]
				if want.quit && quitEvents != 1 || len(kube) > 1 || len(kube) == 1 && (!want.quit || !strings.Contains(kube[0], "Normal ProxyQuit")) {
					t.Errorf("%s: new Kubernetes Events %q, %d ProxyQuit on the pod (quit expected: %v)", ev.file, kube, quitEvents, want.quit)
				}
			}
			if sc.quitsPerPod > 0 {
				for _, p := range sc.pods {
					if quits[p] != sc.quitsPerPod {
						t.Errorf("pod %s: %d quits, want %d", p, quits[p], sc.quitsPerPod)
					}
				}
			}
		})
	}
}

// TestReplayNotOptedIn replays every scenario in namespaces that are not
// opted in: nothing may ever be exec'd.
func TestReplayNotOptedIn(t *testing.T) {
	for name := range scenarios {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig(), nil)
			for _, ev := range loadScenario(t, name) {
				h.makeLive(t, ev.live, ev.event.Type() == podevent.TypeAPIServerDelete)
				if code := codeOf(t, h.fn.Handle(context.Background(), ev.event)); code != 200 {
					t.Errorf("%s: code %d, want 200", ev.file, code)
				}
			}
			if calls := h.exec.Calls(); len(calls) != 0 {
				t.Errorf("exec calls %v in a namespace that is not opted in", calls)
			}
		})
	}
}

// makeLive makes p the live pod (or deletes it), creating its namespace
// with the harness's labels on first sight.
func (h *harness) makeLive(t testing.TB, p *corev1.Pod, gone bool) {
	t.Helper()
	ctx := context.Background()
	nsLabels := optedIn
	if ns, err := h.client.CoreV1().Namespaces().Get(ctx, testNS, metav1.GetOptions{}); err == nil {
		nsLabels = ns.Labels
	}
	if _, err := h.client.CoreV1().Namespaces().Get(ctx, p.Namespace, metav1.GetOptions{}); err != nil {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace, Labels: nsLabels}}
		if _, err := h.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if gone {
		_ = h.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		return
	}
	h.setPod(t, p)
}

// isSubsequence reports whether want appears in got in order (not
// necessarily adjacent).
func isSubsequence(want, got []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}
