//go:build e2e

package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// The opted-in pods the bridge serves throughout outside, and their status
// changes a second.
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

func (w window) cpuPerSecond() float64 { return msPerSecond(w.cpu, w.length) }

func (w window) plus(o window) window {
	return window{w.cpu + o.cpu, w.length + o.length, w.decoded + o.decoded, w.changes + o.changes}
}

// outside measures what p.outsidePods running run-to-completion pods
// outside the opt-in, their statuses changing p.outsideChurn times a
// second, cost one bridge that serves insidePods opted-in pods
// (docs/bench.md): its RSS, the pods it decodes, and its CPU in
// interleaved windows with and without their changes.
func outside(t *testing.T, a *istioaux.IstioAux, cs kubernetes.Interface, p params, res *results) {
	ctx := context.Background()
	const in = "bench-inside"
	inside := refs(in, "in", insidePods)
	if err := parkedNamespace(ctx, cs, in, mesh.OptedIn); err != nil {
		t.Fatal(err)
	}
	if err := createPods(ctx, cs, inside, true, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.StopBridge(); err != nil {
		t.Fatal(err)
	}
	if err := a.StartBridgeAs(istioaux.Deployed); err != nil {
		t.Fatal(err)
	}
	_, pid := a.Pids()
	rss := func() int64 {
		v, err := settledRSS(ctx, pid)
		if err != nil {
			t.Fatalf("bridge RSS: %v", err)
		}
		return v
	}
	rssNone := rss()
	none := bridgeWindow(t, a, cs, pid, inside, nil, p.outsideChurn, time.Duration(p.cpuPairs)*p.cpuSlice)

	// Nine of the ten namespaces carry no label; the tenth is labelled
	// istio-aux.dev/enabled=pods, and its pods are not labelled.
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
		pods := refs(namespaces[i], "out", p.outsidePods/10)
		if err := createPods(ctx, cs, pods, true, func(i int, pod *corev1.Pod) {
			if i%2 == 1 {
				pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			}
		}); err != nil {
			t.Fatal(err)
		}
		out = append(out, pods...)
	}
	created := decodedPods(t, a) - decoded0
	rssWith := rss()
	var off, on window
	for range p.cpuPairs {
		off = off.plus(bridgeWindow(t, a, cs, pid, inside, nil, p.outsideChurn, p.cpuSlice))
		on = on.plus(bridgeWindow(t, a, cs, pid, inside, out, p.outsideChurn, p.cpuSlice))
	}
	alone := bridgeWindow(t, a, cs, pid, nil, out, p.outsideChurn, 10*time.Second)
	// The inside pods go too: the webhook labelled them, and the next part
	// (namespaces) needs no labelled pod but its own.
	for _, ns := range slices.Concat(namespaces, []string{in}) {
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
	stopIn, stopOut := churn(ctx, cs, inside, insideChurn), churn(ctx, cs, outside, outsideChurn)
	time.Sleep(d) // the window itself, not a wait for anything
	w.cpu, w.length = cpuOf(t, pid)-cpu0, time.Since(start)
	w.changes = stopIn()
	outChanges := stopOut()
	w.decoded = decodedSince(t, a, decoded0, w.changes)
	if len(inside) == 0 {
		w.changes = outChanges // the outside pods' own, for the count of them alone
	}
	return w
}
