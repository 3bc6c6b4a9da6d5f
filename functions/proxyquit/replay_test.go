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

	"github.com/istio-aux/istio-aux/functions/podevent"
)

// testdata holds recorded events: one folder per scenario, files in order.
const testdata = "../../test/testdata"

// step is what must happen for one recorded event, keyed by its file name.
type step struct {
	file    string
	outcome string
	quit    string // pod the quit command is exec'd in ("" = no exec)
	gone    bool   // the pod no longer exists when the event arrives
}

// scenarios are the expectations, written from the decision table, not
// copied from the function's output. Every file in a scenario folder must
// have a step, so a new recording cannot slip in unchecked.
var scenarios = map[string][]step{
	"tfjob-mnist-2-workers": {
		{file: "001-worker-0-init.json", outcome: OutcomeWait},
		{file: "002-worker-1-init.json", outcome: OutcomeWait},
		{file: "003-worker-0-podinitializing.json", outcome: OutcomeWait},
		{file: "004-worker-1-podinitializing.json", outcome: OutcomeWait},
		{file: "005-worker-0-1of2.json", outcome: OutcomeWait},
		{file: "006-worker-1-1of2.json", outcome: OutcomeWait},
		{file: "007-worker-0-2of2.json", outcome: OutcomeWait},
		{file: "008-worker-1-2of2.json", outcome: OutcomeWait},
		{file: "009-worker-1-app-done.json", outcome: OutcomeQuit, quit: "mnist-worker-1"},
		{file: "010-worker-0-app-done.json", outcome: OutcomeQuit, quit: "mnist-worker-0"},
		{file: "011-worker-1-proxy-quit.json", outcome: OutcomeIgnored},
		{file: "012-worker-0-completed.json", outcome: OutcomeIgnored},
		{file: "013-worker-1-completed.json", outcome: OutcomeIgnored},
	},
	"onfailure-retry": {
		{file: "001-running.json", outcome: OutcomeWait},
		// The kubelet will restart the app: quitting now would leave the
		// retry without a network (the reference implementation's bug).
		{file: "002-first-attempt-failed.json", outcome: OutcomeWait},
		{file: "003-back-off.json", outcome: OutcomeWait},
		{file: "004-second-attempt-running.json", outcome: OutcomeWait},
		{file: "005-second-attempt-succeeded.json", outcome: OutcomeQuit, quit: "download-7xk2p"},
		{file: "006-completed.json", outcome: OutcomeIgnored},
	},
	"never-failing-app": {
		{file: "001-running.json", outcome: OutcomeWait},
		{file: "002-app-failed.json", outcome: OutcomeQuit, quit: "migrate-db-4q9wz"},
		{file: "003-failed.json", outcome: OutcomeIgnored},
	},
	"two-apps": {
		{file: "001-both-running.json", outcome: OutcomeWait},
		{file: "002-render-done.json", outcome: OutcomeWait},
		{file: "003-upload-done.json", outcome: OutcomeQuit, quit: "report-8d7fj"},
		{file: "004-completed.json", outcome: OutcomeIgnored},
	},
	"native-sidecar": {
		{file: "001-running.json", outcome: OutcomeIgnored},
		{file: "002-app-done.json", outcome: OutcomeIgnored},
		{file: "003-completed.json", outcome: OutcomeIgnored},
	},
	"deleted-mid-run": {
		{file: "001-a-running.json", outcome: OutcomeWait},
		{file: "002-a-deleting.json", outcome: OutcomeIgnored},
		{file: "003-a-deleting-app-killed.json", outcome: OutcomeIgnored},
		{file: "004-b-running.json", outcome: OutcomeWait},
		// The app finished, then the pod was deleted before the event came.
		{file: "005-b-app-done-then-deleted.json", outcome: OutcomeGone, gone: true},
	},
	"apiserversource": {
		{file: "001-add-pending.json", outcome: OutcomeWait},
		{file: "002-update-running.json", outcome: OutcomeWait},
		{file: "003-update-app-done.json", outcome: OutcomeQuit, quit: "train-lr-h2j6d"},
		{file: "004-update-completed.json", outcome: OutcomeIgnored},
		{file: "005-delete.json", outcome: OutcomeIgnored},
	},
}

// recorded is one event file.
type recorded struct {
	file  string
	event cloudevents.Event
	pod   *corev1.Pod
}

func loadScenario(t testing.TB, dir string) []recorded {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testdata, dir, "*.json"))
	if err != nil {
		t.Fatal(err)
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
		out = append(out, recorded{file: filepath.Base(f), event: e, pod: pod})
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

// TestReplay feeds each scenario, in order, through Handle against a fake
// API whose live pod is the event's pod, in an opted-in namespace.
func TestReplay(t *testing.T) {
	for name, steps := range scenarios {
		t.Run(name, func(t *testing.T) {
			events := loadScenario(t, name)
			if got, want := fileNames(events), stepFiles(steps); !slices.Equal(got, want) {
				t.Fatalf("files %v, expectations for %v", got, want)
			}
			h := newHarness(t, DefaultConfig(), optedIn)
			for i, ev := range events {
				st := steps[i]
				h.makeLive(t, ev.pod, st.gone)
				before := len(h.exec.Calls())
				counted := h.count(ev.event.Type(), st.outcome)

				res := h.fn.Handle(context.Background(), ev.event)

				if code := codeOf(t, res); code != 200 {
					t.Errorf("%s: code %d (%v), want 200", ev.file, code, res)
				}
				if got := h.count(ev.event.Type(), st.outcome); got != counted+1 {
					t.Errorf("%s: outcome %q not counted (%v)", ev.file, st.outcome, res)
				}
				calls := h.exec.Calls()[before:]
				var want []execCall
				if st.quit != "" {
					want = []execCall{{ev.pod.Namespace, st.quit, "istio-proxy", defaultArgv}}
				}
				if !slices.EqualFunc(calls, want, execCallEqual) {
					t.Errorf("%s: exec calls %v, want %v", ev.file, calls, want)
				}
				kube := h.events()
				if wantQuit := st.quit != ""; wantQuit != (len(kube) == 1 && strings.Contains(kube[0], "Normal ProxyQuit")) {
					t.Errorf("%s: Kubernetes Events %q (quit expected: %v)", ev.file, kube, wantQuit)
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
				h.makeLive(t, ev.pod, false)
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

func fileNames(rs []recorded) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.file
	}
	return out
}

func stepFiles(steps []step) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.file
	}
	return out
}
