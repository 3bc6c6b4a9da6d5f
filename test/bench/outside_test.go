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
	"github.com/istio-aux/istio-aux/test/poll"
)

// The opted-in work the bridge does throughout outside: pods, and status
// changes a second among them.
const (
	insidePods  = 1000
	insideChurn = 10
)

// window is what outside reads of the bridge over measurement windows.
type window struct {
	cpu     time.Duration
	length  time.Duration
	decoded float64 // pod objects decoded
	changes int64   // status changes written to opted-in pods
}

func (w window) cpuPerSecond() float64 {
	return float64(w.cpu.Microseconds()) / 1000 / w.length.Seconds()
}

func (w window) plus(o window) window {
	return window{w.cpu + o.cpu, w.length + o.length, w.decoded + o.decoded, w.changes + o.changes}
}

// outside measures what p.outsidePods running run-to-completion pods
// (Never and OnFailure) outside the opt-in, whose statuses change
// p.outsideChurn times a second in total, cost one bridge that serves
// insidePods opted-in pods changing insideChurn times a second: its RSS
// before they exist and with them; pods it decodes while they are created
// and while only they change (none is the target); and its CPU with their
// changes against without, in p.cpuPairs interleaved pairs of p.cpuSlice
// windows (on a shared host the CPU a process needs for the same work moves
// with the load; windows side by side see the same load). Their existence
// alone costs no CPU: nothing about them reaches the bridge (the counts),
// so the CPU of the windows without their changes is that of the bridge
// with none of them; a window before they exist is reported beside it.
// Nine of the ten outside namespaces carry no label; the tenth is labelled
// istio-aux.dev/enabled=pods, and its pods are not labelled.
func outside(t *testing.T, a *istioaux.IstioAux, cs kubernetes.Interface, p params, res *results) {
	ctx := context.Background()
	const in = "bench-inside"
	if err := createParkedNamespace(ctx, cs, in, true); err != nil {
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
	rss := func() int64 {
		v, err := settledRSS(ctx, pid)
		if err != nil {
			t.Fatalf("bridge RSS: %v", err)
		}
		return v
	}
	rssNone := rss()
	none := bridgeWindow(t, a, cs, pid, inside, nil, p.outsideChurn, time.Duration(p.cpuPairs)*p.cpuSlice)

	namespaces := make([]string, 10)
	var out []podRef
	decoded0 := decodedPods(t, a)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("bench-outside-%d", i)
		var labels map[string]string
		if i == 9 {
			labels = map[string]string{keys.LabelEnabled: keys.LabelEnabledPods}
		}
		if err := parkedNamespace(ctx, cs, namespaces[i], labels); err != nil {
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
	rssWith := rss()
	var off, on window
	for range p.cpuPairs {
		off = off.plus(bridgeWindow(t, a, cs, pid, inside, nil, p.outsideChurn, p.cpuSlice))
		on = on.plus(bridgeWindow(t, a, cs, pid, inside, out, p.outsideChurn, p.cpuSlice))
	}
	alone := bridgeWindow(t, a, cs, pid, nil, out, p.outsideChurn, 10*time.Second)
	for _, ns := range namespaces {
		if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	n := len(out)
	res.add("outside", fmt.Sprintf("bridge RSS with %d opted-in pods: before / with %d pods outside the opt-in", insidePods, n),
		fmt.Sprintf("%s / %s (%.3fx)", mib(rssNone), mib(rssWith), float64(rssWith)/float64(rssNone)), "≤ 1.05x", verdict(float64(rssWith) <= 1.05*float64(rssNone)))
	res.add("outside", fmt.Sprintf("pods decoded: while the %d outside were created / over 10 s of %d changes of theirs alone", n, alone.changes),
		fmt.Sprintf("%.0f / %.0f", created, alone.decoded), "0 / 0", verdict(created == 0 && alone.decoded == 0))
	res.add("outside", fmt.Sprintf("bridge CPU, %d opted-in pods changing %d/s: before the outside pods / with them still / with them changing %d/s",
		insidePods, insideChurn, p.outsideChurn),
		fmt.Sprintf("%.2f / %.2f / %.2f CPU-ms/s (%d pairs of %.0f s windows)", none.cpuPerSecond(), off.cpuPerSecond(), on.cpuPerSecond(), p.cpuPairs, p.cpuSlice.Seconds()), "", "")
	ratio := on.cpuPerSecond() / off.cpuPerSecond()
	res.add("outside", "bridge CPU with their changes / without (interleaved)", fmt.Sprintf("%.3fx", ratio), "≤ 1.05x", verdict(ratio <= 1.05))
	res.add("outside", "opted-in changes / pods decoded, over the windows with their changes", fmt.Sprintf("%d / %.0f", on.changes, on.decoded), "", "")
}

// bridgeWindow changes the statuses of inside (insideChurn a second) and
// outside (outsideChurn a second) pods for d, reading the bridge's CPU
// meanwhile, and the pods it decoded once every change to an inside pod is
// in.
func bridgeWindow(t *testing.T, a *istioaux.IstioAux, cs kubernetes.Interface, pid int, inside, outside []podRef, outsideChurn int, d time.Duration) window {
	ctx := context.Background()
	var w window
	decoded0, cpu0, start := decodedPods(t, a), cpuOf(t, pid), time.Now()
	stopIn, stopOut := func() int64 { return 0 }, func() int64 { return 0 }
	if len(inside) > 0 {
		stopIn = churn(ctx, cs, inside, insideChurn)
	}
	if len(outside) > 0 {
		stopOut = churn(ctx, cs, outside, outsideChurn)
	}
	sleepFor(t, d)
	w.cpu, w.length = cpuOf(t, pid)-cpu0, time.Since(start)
	w.changes = stopIn()
	outChanges := stopOut()
	// Every change of an opted-in pod reaches the bridge; then whatever
	// else it decoded is counted too.
	_ = poll.Until(ctx, 10*time.Second, func(context.Context) (bool, error) {
		return decodedPods(t, a)-decoded0 >= float64(w.changes), nil
	})
	w.decoded = decodedPods(t, a) - decoded0
	if len(inside) == 0 {
		w.changes = outChanges // the outside pods' own, for the count of them alone
	}
	return w
}

// sleepFor waits d: the length of a measurement window (nothing to poll).
func sleepFor(t *testing.T, d time.Duration) {
	start := time.Now()
	if err := poll.Until(context.Background(), d+time.Minute, func(context.Context) (bool, error) {
		return time.Since(start) >= d, nil
	}); err != nil {
		t.Fatal(err)
	}
}

func decodedPods(t *testing.T, a *istioaux.IstioAux) float64 {
	v, err := cluster.Scrape(context.Background(), a.BridgeMetricsURL(), "istio_aux_bridge_pods_decoded_total")
	if err != nil {
		t.Fatalf("bridge metrics: %v", err)
	}
	return v
}
