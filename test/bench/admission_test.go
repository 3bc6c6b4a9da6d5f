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

// admission times sequential pod CREATEs in an opted-in namespace on the
// real kube-apiserver, first with no webhook registered, then with
// istio-aux's webhook registered and mutating every pod. It returns the
// running istio-aux.
func admission(t *testing.T, cs kubernetes.Interface, start func() *istioaux.IstioAux, p params, res *results) *istioaux.IstioAux {
	ctx := context.Background()
	const ns = "bench-admission"
	if err := createNamespace(ctx, cs, ns, true); err != nil {
		t.Fatal(err)
	}
	without := timeCreates(t, cs, ns, "without", p.creates, false)
	a := start()
	with := timeCreates(t, cs, ns, "with", p.creates, true)
	// The pods are only timed; the memory phase must not count them.
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	added := percentile(with, 0.99) - percentile(without, 0.99)
	res.add("webhook", fmt.Sprintf("pod CREATE p50 / p99, no webhook (n=%d)", len(without)), p50p99(without), "", "")
	res.add("webhook", fmt.Sprintf("pod CREATE p50 / p99, webhook mutating (n=%d)", len(with)), p50p99(with), "", "")
	res.add("webhook", "added CREATE latency p50 / p99",
		ms(percentile(with, 0.5)-percentile(without, 0.5))+" / "+ms(added), "p99 ≤ 5 ms", verdict(added <= 5*time.Millisecond))
	return a
}

// timeCreates creates n pods one after another and returns each CREATE's
// round trip; mutated says whether the webhook must have mutated them.
func timeCreates(t *testing.T, cs kubernetes.Interface, ns, prefix string, n int, mutated bool) []time.Duration {
	ctx := context.Background()
	out := make([]time.Duration, 0, n)
	// A few untimed creates warm connections and the apiserver's caches.
	for i := range n + 10 {
		pod := benchPod(fmt.Sprintf("%s-%05d", prefix, i), nil)
		pod.Spec.NodeName = parkedNode
		start := time.Now()
		got, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		d := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if has := got.Annotations[webhook.AnnotationProxyConfig] != ""; has != mutated {
			t.Fatalf("pod %s: mutated=%v, want %v", got.Name, has, mutated)
		}
		if i >= 10 {
			out = append(out, d)
		}
	}
	return out
}
