package scenario

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Run runs scenario s on tg as test t.
//
// On a real node one failure is not istio-aux's to answer for: the
// container runtime failing to start a pod's container because it took
// the sandbox's PID for 0 ("namespace path: lstat /proc/0/ns/ipc",
// containerd#9160, once in a whole real-node suite on CI's machine). The
// harness's containerd waits for a slow shim (realnode's containerdConfig)
// so it should not happen; should it still, a pod whose proxy never started
// is not one istio-aux can be judged on. So where a run of s failed and a
// pod of the namespaces it made has that start failure in its Events, the
// run's verdict is withheld and s runs once more, in namespaces of its own
// (the test's name with "/again"); that run's verdict is the test's. The
// first run's messages stay in the test's log. Any other failure is the
// test's at once, and on kwok s simply runs.
func Run(t *testing.T, tg Target, s func(testing.TB, Target)) {
	t.Helper()
	if !tg.Real {
		s(t, tg)
		return
	}
	race := func(namespaces []string) string { return runtimeRace(t, tg, namespaces) }
	switch runs(t, func(t testing.TB) { s(t, tg) }, race) {
	case skipped:
		t.SkipNow()
	case failed:
		t.FailNow()
	}
}

type outcome int

const (
	passed outcome = iota
	failed
	skipped
)

// runs runs s once, or twice where the first run failed and race names a
// runtime start failure in the namespaces that run made.
func runs(t testing.TB, s func(testing.TB), race func(namespaces []string) string) outcome {
	for n := 1; ; n++ {
		a := &attempt{TB: t, again: n > 1}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s(a)
		}()
		<-done
		switch {
		case a.skipped:
			return skipped
		case !a.failed:
			return passed
		}
		if n == 1 {
			if why := race(a.namespaces); why != "" {
				t.Logf("this run's verdict is withheld: %s; running the scenario again", why)
				continue
			}
		}
		return failed
	}
}

// startRace is what runc says when it is asked to join the namespaces of a
// sandbox whose PID containerd took for 0.
const startRace = "namespace path: lstat /proc/0/ns/"

// runtimeRace names the first pod of the namespaces whose Events show a
// container start failed by startRace, or "".
func runtimeRace(t *testing.T, tg Target, namespaces []string) string {
	for _, ns := range namespaces {
		evs, err := tg.Cluster.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Logf("the Events of %s: %v", ns, err)
			continue
		}
		if why := raceIn(evs.Items); why != "" {
			return why
		}
	}
	return ""
}

// raceIn names the first pod whose Events show a container start failed
// by startRace, or "".
func raceIn(evs []corev1.Event) string {
	for _, e := range evs {
		if e.Type == corev1.EventTypeWarning && e.Reason == "Failed" && e.InvolvedObject.Kind == "Pod" && strings.Contains(e.Message, startRace) {
			return fmt.Sprintf("the runtime could not start a container of pod %s/%s (%q)", e.InvolvedObject.Namespace, e.InvolvedObject.Name, e.Message)
		}
	}
	return ""
}

// attempt is one run of a scenario: what it logs goes to the test at once;
// its failures are noted, not reported, so that Run can judge them.
type attempt struct {
	testing.TB
	again bool

	mu         sync.Mutex
	failed     bool
	skipped    bool
	namespaces []string
}

// Name is the test's, with "/again" for the second run, so the namespaces
// named after it (mesh.NameFor) are new.
func (a *attempt) Name() string {
	if a.again {
		return a.TB.Name() + "/again"
	}
	return a.TB.Name()
}

func (a *attempt) Helper() {}

func (a *attempt) Fail() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failed = true
}

func (a *attempt) Failed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.failed
}

func (a *attempt) FailNow() {
	a.Fail()
	runtime.Goexit()
}

func (a *attempt) Error(args ...any) {
	a.TB.Helper()
	a.TB.Log(args...)
	a.Fail()
}

func (a *attempt) Errorf(format string, args ...any) {
	a.TB.Helper()
	a.TB.Logf(format, args...)
	a.Fail()
}

func (a *attempt) Fatal(args ...any) {
	a.TB.Helper()
	a.TB.Log(args...)
	a.FailNow()
}

func (a *attempt) Fatalf(format string, args ...any) {
	a.TB.Helper()
	a.TB.Logf(format, args...)
	a.FailNow()
}

func (a *attempt) SkipNow() {
	a.mu.Lock()
	a.skipped = true
	a.mu.Unlock()
	runtime.Goexit()
}

func (a *attempt) Skip(args ...any) {
	a.TB.Helper()
	a.TB.Log(args...)
	a.SkipNow()
}

func (a *attempt) Skipf(format string, args ...any) {
	a.TB.Helper()
	a.TB.Logf(format, args...)
	a.SkipNow()
}

func (a *attempt) Skipped() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.skipped
}

// noteNamespace records a namespace the scenario made, for runtimeRace.
func noteNamespace(t testing.TB, ns string) {
	if a, ok := t.(*attempt); ok {
		a.mu.Lock()
		a.namespaces = append(a.namespaces, ns)
		a.mu.Unlock()
	}
}
