//go:build e2e

package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// The opted-in work the bridge does throughout outside: pods, and status
// changes a second among them.
const (
	insidePods  = 1000
	insideChurn = 10
)

// window is what outside reads of the bridge over one measurement window.
type window struct {
	cpu     time.Duration
	length  time.Duration
	decoded float64 // pod objects decoded over the window
	changes int64   // status changes written to opted-in pods
	rss     int64   // settled VmRSS after the window, KiB
}

func (w window) cpuPerSecond() float64 {
	return float64(w.cpu.Microseconds()) / 1000 / w.length.Seconds()
}

// outside measures one bridge's CPU and RSS while p.outsidePods running
// run-to-completion pods (Never and OnFailure) outside the opt-in change
// status p.outsideChurn times a second in total, against the same bridge
// with none of them, before they are created and after they are deleted
// (so that a drift of the process over time cancels out). Throughout, the
// bridge serves insidePods opted-in pods with insideChurn changes a
// second. Nine of the ten outside namespaces carry no label; the tenth is
// labelled istio-aux.dev/enabled=pods, and its pods are not labelled.
func outside(t *testing.T, a *istioaux.IstioAux, cs kubernetes.Interface, p params, res *results) {
	ctx := context.Background()
	const in = "bench-inside"
	if err := createNamespace(ctx, cs, in, true); err != nil {
		t.Fatal(err)
	}
	if err := createPods(ctx, cs, in, "in", 0, insidePods, true, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.StopBridge(); err != nil {
		t.Fatal(err)
	}
	if err := a.StartBridgeAs(istioaux.Deployed); err != nil {
		t.Fatal(err)
	}
	_, pid := a.Pids()
	inside := refs(in, "in", insidePods)
	measure := func(outside []podRef) window {
		return bridgeWindow(t, a, cs, pid, inside, outside, p)
	}
	before := measure(nil)

	namespaces := make([]string, 10)
	var out []podRef
	decoded0 := decodedPods(t, a)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("bench-outside-%d", i)
		var labels map[string]string
		if i == 9 {
			labels = map[string]string{keys.LabelEnabled: keys.LabelEnabledPods}
		}
		if err := mesh.CreateNamespace(ctx, cs, namespaces[i], labels); err != nil {
			t.Fatal(err)
		}
		onFailure := func(i int, pod *corev1.Pod) {
			if i%2 == 1 {
				pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			}
		}
		if err := createPods(ctx, cs, namespaces[i], "out", 0, p.outsidePods/10, true, onFailure); err != nil {
			t.Fatal(err)
		}
		out = append(out, refs(namespaces[i], "out", p.outsidePods/10)...)
	}
	created := decodedPods(t, a) - decoded0
	with := measure(out)
	// Their changes alone, for a count that owes nothing to subtraction.
	decoded0 = decodedPods(t, a)
	stop := churn(ctx, cs, out, p.outsideChurn)
	sleepFor(t, 10*time.Second)
	outsideChanges := stop()
	alone := decodedPods(t, a) - decoded0
	for _, ns := range namespaces {
		if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	after := measure(nil)

	n := len(out)
	res.add("outside", fmt.Sprintf("bridge CPU, %d opted-in pods changing %d/s: before / with %d pods outside the opt-in changing %d/s / after they are gone",
		insidePods, insideChurn, n, p.outsideChurn),
		fmt.Sprintf("%.2f / %.2f / %.2f CPU-ms/s (%.0f s each)", before.cpuPerSecond(), with.cpuPerSecond(), after.cpuPerSecond(), with.length.Seconds()), "", "")
	cpuRatio := 2 * with.cpuPerSecond() / (before.cpuPerSecond() + after.cpuPerSecond())
	res.add("outside", "bridge CPU, with them / without (mean of before and after)", fmt.Sprintf("%.3fx", cpuRatio), "≤ 1.05x", verdict(cpuRatio <= 1.05))
	rssRatio := float64(with.rss) / float64(before.rss)
	res.add("outside", "bridge RSS, before / with them / after", fmt.Sprintf("%s / %s / %s (%.3fx)", mib(before.rss), mib(with.rss), mib(after.rss), rssRatio), "≤ 1.05x", verdict(rssRatio <= 1.05))
	res.add("outside", fmt.Sprintf("pods decoded: while the %d outside were created / over 10 s of %d changes of theirs alone", n, outsideChanges),
		fmt.Sprintf("%.0f / %.0f", created, alone), "0 / 0", verdict(created == 0 && alone == 0))
	res.add("outside", "pods decoded over the window with them: opted-in changes / decoded", fmt.Sprintf("%d / %.0f", with.changes, with.decoded), "", "")
}

// bridgeWindow changes the statuses of inside (insideChurn a second) and
// outside (p.outsideChurn a second) pods for p.cpuWindow, reading the
// bridge's CPU meanwhile, then the pods it decoded once the changes are
// in, and its settled RSS.
func bridgeWindow(t *testing.T, a *istioaux.IstioAux, cs kubernetes.Interface, pid int, inside, outside []podRef, p params) window {
	ctx := context.Background()
	var w window
	decoded0, cpu0, start := decodedPods(t, a), bridgeCPU(t, pid), time.Now()
	stopIn := churn(ctx, cs, inside, insideChurn)
	stopOut := func() int64 { return 0 }
	if len(outside) > 0 {
		stopOut = churn(ctx, cs, outside, p.outsideChurn)
	}
	sleepFor(t, p.cpuWindow)
	w.cpu, w.length = bridgeCPU(t, pid)-cpu0, time.Since(start)
	w.changes = stopIn()
	stopOut()
	// Every change of an opted-in pod reaches the bridge; then whatever
	// else it decoded is counted too.
	_ = cluster.Poll(ctx, 100*time.Millisecond, 10*time.Second, func(context.Context) (bool, error) {
		return decodedPods(t, a)-decoded0 >= float64(w.changes), nil
	})
	w.decoded = decodedPods(t, a) - decoded0
	var err error
	if w.rss, err = settledRSS(ctx, pid); err != nil {
		t.Fatalf("bridge RSS: %v", err)
	}
	return w
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
