//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/scenario"
)

// The scenarios both kinds of node run (test/scenario), on kwok. Test1 runs
// before any other test starts istio-aux.

func kwok(t *testing.T) scenario.Target {
	return scenario.Target{Cluster: env, Timeout: time.Minute, StopBridge: func(t testing.TB) func() error {
		a := withIstioAux(t)
		if err := a.StopBridge(); err != nil {
			t.Fatal(err)
		}
		return a.StartBridge
	}}
}

func Test1ProblemWithoutIstioAux(t *testing.T) {
	scenario.WithoutIstioAux(t, kwok(t))
	if q := quitsIn(t, mesh.NameFor(t, "")); len(q) != 0 {
		t.Errorf("quits without istio-aux: %+v", q)
	}
}

// withAux runs the scenario on kwok with istio-aux started.
func withAux(t *testing.T, s func(testing.TB, scenario.Target)) {
	withIstioAux(t)
	scenario.Run(t, kwok(t), s)
}

func Test2JobCompletes(t *testing.T) { withAux(t, scenario.WithIstioAux) }

func Test3NeverFailingApp(t *testing.T) { withAux(t, scenario.NeverFailingApp) }

func Test4OnFailureRetry(t *testing.T) { withAux(t, scenario.OnFailureRetry) }

func Test5MissedWhileDown(t *testing.T) { withAux(t, scenario.MissedWhileDown) }

func Test6NotOptedIn(t *testing.T) { withAux(t, scenario.NotOptedIn) }

// quitsIn are the quits kwok's pilot-agent stand-in recorded in ns: the
// execs themselves, beside the Events.
func quitsIn(t *testing.T, ns string) []cluster.Quit {
	t.Helper()
	all, err := env.Quits()
	if err != nil {
		t.Fatal(err)
	}
	var out []cluster.Quit
	for _, q := range all {
		if q.Namespace == ns {
			out = append(out, q)
		}
	}
	return out
}
