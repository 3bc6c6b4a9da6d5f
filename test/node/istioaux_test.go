//go:build e2e

package node

import (
	"context"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/scenario"
)

// The scenarios both kinds of node run (test/scenario), on the real node:
// the reference demo's Kubeflow mnist Job, its app downloading its dataset
// through the proxy at start. Istio's real injector and the real
// pilot-agent run it; only Envoy is a stand-in.

// target is the shared real node with istio-aux installed from config/.
func target(t *testing.T) scenario.Target {
	c, aux := meshCluster(t)
	return scenario.Target{Cluster: c, Real: true, Timeout: 3 * time.Minute, StopBridge: func(t testing.TB) func() error {
		ctx := context.Background()
		if err := aux.Scale(ctx, aux.Watcher(), 0); err != nil {
			t.Fatal(err)
		}
		return func() error { return aux.Scale(ctx, aux.Watcher(), 1) }
	}}
}

// parallel runs the scenario on the shared node beside the other parallel
// tests (scenario.Run: once more where the runtime failed a pod's start).
func parallel(t *testing.T, s func(testing.TB, scenario.Target)) {
	tg := target(t)
	t.Parallel()
	scenario.Run(t, tg, s)
}

func TestNodeMnistWithoutIstioAux(t *testing.T) { parallel(t, scenario.WithoutIstioAux) }

func TestNodeMnistWithIstioAux(t *testing.T) { parallel(t, scenario.WithIstioAux) }

func TestNodeNeverFailingApp(t *testing.T) { parallel(t, scenario.NeverFailingApp) }

func TestNodeOnFailureRetryKeepsProxy(t *testing.T) { parallel(t, scenario.OnFailureRetry) }

func TestNodeNotOptedInLeftAlone(t *testing.T) { parallel(t, scenario.NotOptedIn) }

// TestNodeMissedWhileBridgeDown stops the bridge every pod relies on, so it
// is not parallel.
func TestNodeMissedWhileBridgeDown(t *testing.T) {
	scenario.Run(t, target(t), scenario.MissedWhileDown)
}
