//go:build e2e

package ha

import (
	"context"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/poll"
)

// spread checks that the pods selected in istio-aux's namespace are want
// Ready pods, on want nodes.
func spread(t *testing.T, c *cluster.Cluster, selector string, want int) {
	t.Helper()
	pods, err := c.Client().CoreV1().Pods(istioaux.SystemNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	ready := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		nodes[p.Spec.NodeName] = true
		if cluster.PodReady(&p) {
			ready++
		}
	}
	if ready != want || len(nodes) != want {
		t.Errorf("%s: %d Ready pods on nodes %v, want %d on %d nodes", selector, ready, sortedNames(nodes), want, want)
	}
}

// leaseHolder is who holds the watcher's Lease.
func leaseHolder(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	var holder string
	err := poll.Until(context.Background(), time.Minute, func(ctx context.Context) (bool, error) {
		l, err := c.Client().CoordinationV1().Leases(istioaux.SystemNamespace).Get(ctx, "istio-aux-watcher", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return holder != "", nil
	})
	if err != nil {
		t.Fatalf("the watcher's Lease: %v", err)
	}
	return holder
}

func sortedNames(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// nodeOf is the node pod name of istio-aux's namespace runs on.
func nodeOf(t *testing.T, c *cluster.Cluster, pod string) string {
	t.Helper()
	p, err := c.Client().CoreV1().Pods(istioaux.SystemNamespace).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Spec.NodeName
}
