//go:build e2e

package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/webhook"
)

// admission times sequential pod CREATEs on the real kube-apiserver: first
// with no webhook registered, then with istio-aux's webhook registered,
// alternating between an opted-in namespace (the webhook mutates every pod)
// and one that is not (its selectors keep the API server from calling it),
// so that both arms of the added latency see the same load. It returns the
// running istio-aux.
func admission(t *testing.T, cs kubernetes.Interface, start func() *istioaux.IstioAux, p params, res *results) *istioaux.IstioAux {
	ctx := context.Background()
	const on, off = "bench-admission", "bench-admission-off"
	if err := createNamespace(ctx, cs, on, true); err != nil {
		t.Fatal(err)
	}
	if err := createNamespace(ctx, cs, off, false); err != nil {
		t.Fatal(err)
	}
	unregistered, _ := timeCreates(t, cs, off, on, p.creates, false)
	a := start()
	without, with := timeCreates(t, cs, off, on, p.creates, true)
	// The pods are only timed; the memory phase must not count them.
	for _, ns := range []string{on, off} {
		if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	added := percentile(with, 0.99) - percentile(without, 0.99)
	res.add("webhook", fmt.Sprintf("pod CREATE p50 / p99, no webhook registered (n=%d)", len(unregistered)), p50p99(unregistered), "", "")
	res.add("webhook", fmt.Sprintf("pod CREATE p50 / p99, registered, not called (n=%d)", len(without)), p50p99(without), "", "")
	res.add("webhook", fmt.Sprintf("pod CREATE p50 / p99, registered, mutating (n=%d)", len(with)), p50p99(with), "", "")
	res.add("webhook", "added CREATE latency p50 / p99 (mutating - not called)",
		ms(percentile(with, 0.5)-percentile(without, 0.5))+" / "+ms(added), "p99 ≤ 5 ms", verdict(added <= 5*time.Millisecond))
	return a
}

// timeCreates creates n pods in each of two namespaces, alternating, one
// after another, and returns each CREATE's round trip per namespace;
// webhook says whether istio-aux's webhook runs and must have mutated the
// pods in the opted-in namespace (and only there).
func timeCreates(t *testing.T, cs kubernetes.Interface, off, on string, n int, webhookUp bool) (offLat, onLat []time.Duration) {
	ctx := context.Background()
	create := func(ns, name string, mutated bool) time.Duration {
		pod := benchPod(name, nil)
		pod.Spec.NodeName = parkedNode
		start := time.Now()
		got, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		d := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if has := got.Annotations[webhook.AnnotationProxyConfig] != ""; has != mutated {
			t.Fatalf("pod %s/%s: mutated=%v, want %v", ns, got.Name, has, mutated)
		}
		return d
	}
	prefix := "unregistered"
	if webhookUp {
		prefix = "registered"
	}
	// A few untimed creates warm connections and the apiserver's caches.
	for i := range n + 10 {
		name := fmt.Sprintf("%s-%05d", prefix, i)
		a, b := create(off, name, false), create(on, name, webhookUp)
		if i >= 10 {
			offLat, onLat = append(offLat, a), append(onLat, b)
		}
	}
	if !webhookUp {
		// Both namespaces are alike without a webhook: one sample set.
		return append(offLat, onLat...), nil
	}
	return offLat, onLat
}
