//go:build e2e

package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
)

// podsPerNamespace is the size of each of the many namespaces.
const podsPerNamespace = 10

// nsSample is what one arm of namespaceScale measures.
type nsSample struct {
	ready, apiStart, optIn time.Duration
	bridgeRSS, apiRSS      int64 // KiB
	watches                float64
	goroutines, heap       float64       // the bridge's, once settled
	apiCPU, bridgeCPU      time.Duration // over window
	window                 time.Duration
}

// namespaceScale compares the bridge watching p.namespaces opted-in
// namespaces of podsPerNamespace pods each (one pod watch each) with it
// watching one namespace of as many pods (one watch): the bridge's RSS and
// time to ready, and what it costs the API server, at start and in steady
// state. Both sets of pods exist throughout, parked Running, so the API
// server holds the same objects in both arms; each arm opts in only its own
// namespaces.
func namespaceScale(t *testing.T, c *cluster.Cluster, a *istioaux.IstioAux, cs kubernetes.Interface, p params, res *results) {
	ctx := context.Background()
	n := p.namespaces * podsPerNamespace
	const one = "bench-ns-one"
	if err := parkedNamespace(ctx, cs, one, nil); err != nil {
		t.Fatal(err)
	}
	if err := createPods(ctx, cs, one, "p", 0, n, true, nil); err != nil {
		t.Fatal(err)
	}
	many := make([]string, p.namespaces)
	var manyPods []podRef
	for i := range many {
		many[i] = fmt.Sprintf("bench-ns-%04d", i)
		manyPods = append(manyPods, refs(many[i], "p", podsPerNamespace)...)
	}
	if err := parallel(len(many), 16, func(i int) error {
		if err := parkedNamespace(ctx, cs, many[i], nil); err != nil {
			return err
		}
		return createPods(ctx, cs, many[i], "p", 0, podsPerNamespace, true, nil)
	}); err != nil {
		t.Fatal(err)
	}
	o := nsArm(t, c, a, cs, []string{one}, refs(one, "p", n), p)
	m := nsArm(t, c, a, cs, many, manyPods, p)

	arms := fmt.Sprintf("1 namespace of %d pods / %d namespaces of %d", n, p.namespaces, podsPerNamespace)
	secs := func(a, b time.Duration) string { return fmt.Sprintf("%.1f / %.1f s", a.Seconds(), b.Seconds()) }
	rate := func(d, w time.Duration) float64 { return float64(d.Milliseconds()) / w.Seconds() }
	res.add("namespaces", "pod watches open at the API server (all clients), "+arms, fmt.Sprintf("%.0f / %.0f", o.watches, m.watches), "", "")
	res.add("namespaces", "bridge start to ready (every pod listed), "+arms, secs(o.ready, m.ready), "", "")
	res.add("namespaces", "opted in while the bridge runs, to every pod cached, "+arms, secs(o.optIn, m.optIn), "", "")
	res.add("namespaces", "bridge RSS, "+arms, fmt.Sprintf("%s / %s (%.2fx)", mib(o.bridgeRSS), mib(m.bridgeRSS), float64(m.bridgeRSS)/float64(o.bridgeRSS)), "", "")
	res.add("namespaces", "bridge goroutines / heap in use, "+arms, fmt.Sprintf("%.0f / %.0f; %.1f / %.1f MiB", o.goroutines, m.goroutines, o.heap/(1<<20), m.heap/(1<<20)), "", "")
	res.add("namespaces", "API server CPU during the bridge's start, "+arms, fmt.Sprintf("%.2f / %.2f CPU-s", o.apiStart.Seconds(), m.apiStart.Seconds()), "", "")
	res.add("namespaces", fmt.Sprintf("API server CPU, %d status changes/s among the pods, %s", p.outsideChurn, arms),
		fmt.Sprintf("%.1f / %.1f CPU-ms/s (%.2fx; %.0f s each)", rate(o.apiCPU, o.window), rate(m.apiCPU, m.window),
			rate(m.apiCPU, m.window)/rate(o.apiCPU, o.window), o.window.Seconds()), "", "")
	res.add("namespaces", "bridge CPU, same window, "+arms, fmt.Sprintf("%.2f / %.2f CPU-ms/s", rate(o.bridgeCPU, o.window), rate(m.bridgeCPU, m.window)), "", "")
	res.add("namespaces", "API server RSS after the window, "+arms, mib(o.apiRSS)+" / "+mib(m.apiRSS), "", "")
}

// nsArm opts names in, restarts the bridge (deployed shape) and measures
// its start, its RSS and a steady window of p.outsideChurn status changes a
// second among pods; then opts names out and in again while the bridge
// runs, timing until every pod is cached, and out once more.
func nsArm(t *testing.T, c *cluster.Cluster, a *istioaux.IstioAux, cs kubernetes.Interface, names []string, pods []podRef, p params) nsSample {
	ctx := context.Background()
	api := c.Pids()["kube-apiserver"]
	optIn := func(on bool) {
		v := ""
		if on {
			v = "true"
		}
		if err := labelNamespaces(ctx, cs, names, keys.LabelEnabled, v); err != nil {
			t.Fatal(err)
		}
	}
	optIn(true)
	if err := a.StopBridge(); err != nil {
		t.Fatal(err)
	}
	var s nsSample
	cpu0, start := procCPU(t, api), time.Now()
	if err := a.StartBridgeAs(istioaux.Deployed); err != nil {
		t.Fatal(err)
	}
	s.ready, s.apiStart = time.Since(start), procCPU(t, api)-cpu0
	t.Logf("namespaces: bridge ready after %v watching %d namespaces", s.ready, len(names))
	_, pid := a.Pids()
	var err error
	if s.bridgeRSS, err = settledRSS(ctx, pid); err != nil {
		t.Fatalf("bridge RSS: %v", err)
	}
	if s.watches, err = apiserverMetric(ctx, cs, "apiserver_longrunning_requests", `resource="pods"`, `verb="WATCH"`); err != nil {
		t.Fatal(err)
	}
	if s.goroutines, err = scrape(ctx, a.BridgeMetricsURL(), "go_goroutines"); err != nil {
		t.Fatal(err)
	}
	if s.heap, err = scrape(ctx, a.BridgeMetricsURL(), "go_memstats_heap_inuse_bytes"); err != nil {
		t.Fatal(err)
	}

	cpu0, bcpu0, start := procCPU(t, api), bridgeCPU(t, pid), time.Now()
	stop := churn(ctx, cs, pods, p.outsideChurn)
	sleepFor(t, p.cpuWindow)
	s.apiCPU, s.bridgeCPU, s.window = procCPU(t, api)-cpu0, bridgeCPU(t, pid)-bcpu0, time.Since(start)
	stop()
	if s.apiRSS, err = procStatusKiB(api, "VmRSS"); err != nil {
		t.Fatal(err)
	}

	// Other parts' namespaces may be opted in too: the arm's opt-out is
	// done when the count of watched namespaces is back where it was.
	watched := func(ctx context.Context) (int, error) {
		v, err := scrape(ctx, a.BridgeMetricsURL(), "istio_aux_bridge_watched_namespaces", `scope="all"`)
		return int(v), err
	}
	all, err := watched(ctx)
	if err != nil {
		t.Fatal(err)
	}
	optedOut := func() {
		optIn(false)
		if err := cluster.Poll(ctx, 100*time.Millisecond, 2*time.Minute, func(ctx context.Context) (bool, error) {
			n, err := watched(ctx)
			return err == nil && n == all-len(names), err
		}); err != nil {
			t.Fatalf("bridge still watching after the opt-out: %v", err)
		}
	}
	optedOut()
	t.Logf("namespaces: %d opted out", len(names))
	decoded0 := decodedPods(t, a)
	start = time.Now()
	optIn(true)
	if err := cluster.Poll(ctx, 100*time.Millisecond, 5*time.Minute, func(ctx context.Context) (bool, error) {
		return decodedPods(t, a)-decoded0 >= float64(len(pods)), nil
	}); err != nil {
		t.Fatalf("pods not cached after the opt-in: %v", err)
	}
	s.optIn = time.Since(start)
	t.Logf("namespaces: %d opted in again, every pod decoded after %v", len(names), s.optIn)
	optedOut()
	return s
}
