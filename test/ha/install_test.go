//go:build e2e

package ha

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// istio-aux as installed on the three nodes, switched between the two
// shapes by the tests that need them (they run one after another).
var installed struct {
	mu  sync.Mutex
	aux *istioaux.Installed
}

// installedAs is the three-node cluster with istio-aux installed from dir
// (istioaux.Config or istioaux.Standalone) as users install it: `ko apply`,
// images from the cluster's registry. Knative Serving is not installed
// here (docs/bench.md: its components and three kubelets do not fit two
// cores); the function runs as the Deployment Knative would make of it.
func installedAs(t *testing.T, dir string) (*mesh.Mesh, *istioaux.Installed) {
	t.Helper()
	m := threeNodes(t)
	installed.mu.Lock()
	defer installed.mu.Unlock()
	if installed.aux != nil && installed.aux.Dir() == dir {
		return m, installed.aux
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var aux *istioaux.Installed
	var err error
	if installed.aux != nil {
		aux, err = installed.aux.Move(ctx, dir)
	} else {
		aux, err = istioaux.Install(ctx, m.Cluster, dir, shared.log)
	}
	if err != nil {
		t.Fatalf("installing istio-aux from %s: %v (pods: %s)", dir, err, m.Cluster.PodsSummary(ctx, istioaux.SystemNamespace, ""))
	}
	installed.aux = aux
	return m, aux
}

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
		if podReady(&p) {
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
	err := cluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
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
