//go:build e2e

package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// The opted-in work both arms of outside share: pods, and status changes a
// second among them.
const (
	insidePods  = 100
	insideChurn = 1
)

// bridgeSample is what one arm of a watch-scope part reads of the bridge.
type bridgeSample struct {
	rss     int64         // settled VmRSS, KiB
	cpu     time.Duration // over the window
	window  time.Duration
	decoded float64 // pod objects decoded over the window
	changes int64   // status changes written to opted-in pods over the window
}

func (s bridgeSample) cpuPerSecond() float64 {
	return float64(s.cpu.Microseconds()) / 1000 / s.window.Seconds()
}

// outside measures the bridge's CPU and RSS with p.outsidePods running
// run-to-completion pods (Never and OnFailure) outside the opt-in whose
// statuses change p.outsideChurn times a second in total, against the same
// bridge with none: the cost of pods istio-aux does not serve. Both arms
// run the same opted-in work (insidePods pods, insideChurn changes a
// second), and start the bridge afresh in the deployed shape. Nine of the
// ten outside namespaces carry no label; the tenth is labelled
// istio-aux.dev/enabled=pods, and its pods are not labelled.
func outside(t *testing.T, a *istioaux.IstioAux, cs kubernetes.Interface, p params, res *results) {
	ctx := context.Background()
	const in = "bench-inside"
	if err := createNamespace(ctx, cs, in, true); err != nil {
		t.Fatal(err)
	}
	if err := createPods(ctx, cs, in, "in", 0, insidePods, true, nil); err != nil {
		t.Fatal(err)
	}
	none := bridgeArm(t, a, cs, refs(in, "in", insidePods), nil, p)

	var out []podRef
	per := p.outsidePods / 10
	for i := range 10 {
		ns := fmt.Sprintf("bench-outside-%d", i)
		var labels map[string]string
		if i == 9 {
			labels = map[string]string{keys.LabelEnabled: keys.LabelEnabledPods}
		}
		if err := mesh.CreateNamespace(ctx, cs, ns, labels); err != nil {
			t.Fatal(err)
		}
		onFailure := func(i int, pod *corev1.Pod) {
			if i%2 == 1 {
				pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			}
		}
		if err := createPods(ctx, cs, ns, "out", 0, per, true, onFailure); err != nil {
			t.Fatal(err)
		}
		out = append(out, refs(ns, "out", per)...)
	}
	with := bridgeArm(t, a, cs, refs(in, "in", insidePods), out, p)

	n := len(out)
	res.add("outside", fmt.Sprintf("bridge CPU: no pods outside the opt-in / %d outside, %d status changes/s", n, p.outsideChurn),
		fmt.Sprintf("%.2f / %.2f CPU-ms/s (%.0f s each)", none.cpuPerSecond(), with.cpuPerSecond(), none.window.Seconds()), "", "")
	cpuRatio := with.cpuPerSecond() / none.cpuPerSecond()
	res.add("outside", "bridge CPU, with / without them", fmt.Sprintf("%.3fx", cpuRatio), "≤ 1.05x", verdict(cpuRatio <= 1.05))
	res.add("outside", "bridge RSS: without / with them", mib(none.rss)+" / "+mib(with.rss), "", "")
	rssRatio := float64(with.rss) / float64(none.rss)
	res.add("outside", "bridge RSS, with / without them", fmt.Sprintf("%.3fx", rssRatio), "≤ 1.05x", verdict(rssRatio <= 1.05))
	// Each change of an opted-in pod is one pod decoded; anything more
	// came from outside.
	extra := with.decoded - float64(with.changes)
	res.add("outside", "pods decoded over the window with them: opted-in changes / decoded",
		fmt.Sprintf("%d / %.0f (%.0f from outside)", with.changes, with.decoded, max(extra, 0)), "0 from outside", verdict(extra <= 0))
}

// bridgeArm restarts the bridge (deployed shape), waits for its RSS to
// settle, then changes the statuses of inside (insideChurn a second) and
// outside (p.outsideChurn a second) pods for p.cpuWindow, reading the
// bridge's CPU meanwhile, and the pods it decoded once the changes are in.
func bridgeArm(t *testing.T, a *istioaux.IstioAux, cs kubernetes.Interface, inside, outside []podRef, p params) bridgeSample {
	ctx := context.Background()
	if err := a.StopBridge(); err != nil {
		t.Fatal(err)
	}
	if err := a.StartBridgeAs(istioaux.Deployed); err != nil {
		t.Fatal(err)
	}
	_, pid := a.Pids()
	var s bridgeSample
	var err error
	if s.rss, err = settledRSS(ctx, pid); err != nil {
		t.Fatalf("bridge RSS: %v", err)
	}
	decoded0, cpu0, start := decodedPods(t, a), bridgeCPU(t, pid), time.Now()
	stopIn := churn(ctx, cs, inside, insideChurn)
	stopOut := func() int64 { return 0 }
	if len(outside) > 0 {
		stopOut = churn(ctx, cs, outside, p.outsideChurn)
	}
	sleepFor(t, p.cpuWindow)
	s.cpu, s.window = bridgeCPU(t, pid)-cpu0, time.Since(start)
	s.changes = stopIn()
	stopOut()
	// Every change of an opted-in pod reaches the bridge; then whatever
	// else it decoded is counted too.
	_ = cluster.Poll(ctx, 100*time.Millisecond, 10*time.Second, func(context.Context) (bool, error) {
		return decodedPods(t, a)-decoded0 >= float64(s.changes), nil
	})
	s.decoded = decodedPods(t, a) - decoded0
	return s
}

// sleepFor waits d: the length of a measurement window (nothing to poll).
func sleepFor(t *testing.T, d time.Duration) {
	start := time.Now()
	if err := cluster.Poll(context.Background(), time.Second, d+time.Minute, func(context.Context) (bool, error) {
		return time.Since(start) >= d, nil
	}); err != nil {
		t.Fatal(err)
	}
}

func bridgeCPU(t *testing.T, pid int) time.Duration {
	d, err := threadsCPU(pid)
	if err != nil {
		t.Fatalf("bridge CPU: %v", err)
	}
	return d
}

func decodedPods(t *testing.T, a *istioaux.IstioAux) float64 {
	v, err := scrape(context.Background(), a.BridgeMetricsURL(), "istio_aux_bridge_pods_decoded_total")
	if err != nil {
		t.Fatalf("bridge metrics: %v", err)
	}
	return v
}
