//go:build e2e

package node

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/helm"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/poll"
)

// TestNodeHelm installs istio-aux the way a platform team does, with
// Helm's own code (test/helm) from the chart `make release` pushed to the
// node's registry: `helm install oci://…` of the standalone shape, the
// seed's story, `helm upgrade` to the next release (every image new) with
// Jobs arriving all through it, `helm rollback` to the first with Jobs in
// flight again, and `helm uninstall`, after which nothing of the release is
// left. Each Job completes, each pod was admitted with the hold, and each
// proxy is quit once.
//
// It needs a cluster with no istio-aux installed and leaves none, so it
// runs in a `go test` of its own (hack/versions.sh's SHAPED leaves it out
// of the suite's run): an install re-created right after an uninstall
// meets kubernetes/kubernetes#133827 (the exec policy binding loses its
// params), which is the next test's, not this one's, to meet.
func TestNodeHelm(t *testing.T) {
	m := shared.Mesh(t)
	c := m.Cluster
	ctx := context.Background()
	if _, err := c.Client().CoreV1().Namespaces().Get(ctx, istioaux.SystemNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		msg := "istio-aux is installed in this run's cluster already: run TestNodeHelm on its own (go test -run '^TestNodeHelm$')"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	// Two releases, as a platform team's pipeline makes them: images and
	// chart pushed to the registry and signed.
	releaseCtx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	first, err := istioaux.Publish(releaseCtx, "v0.1.0-e2e", "")
	if err != nil {
		t.Fatalf("make release v0.1.0-e2e: %v", err)
	}
	next, err := istioaux.Publish(releaseCtx, "v0.2.0-e2e", "v0.2.0-e2e")
	if err != nil {
		t.Fatalf("make release v0.2.0-e2e: %v", err)
	}
	t.Logf("released %s %s (%s) and %s (%s)", first.Chart, first.Version, first.Digest, next.Version, next.Digest)

	h, err := helm.New(c, "default")
	if err != nil {
		t.Fatal(err)
	}
	chart1, err := h.Pull(first.Chart, first.Version)
	if err != nil {
		t.Fatal(err)
	}
	chart2, err := h.Pull(next.Chart, next.Version)
	if err != nil {
		t.Fatal(err)
	}
	const name = "istio-aux"
	values := map[string]any{"standalone": true}
	aux := istioaux.Helmed(c, istioaux.Standalone)
	// ready waits until every workload runs the release's images and the
	// webhook mutates pods.
	ready := func(t *testing.T, version string, wait time.Duration) {
		t.Helper()
		if err := aux.WaitAvailable(ctx, wait); err != nil {
			t.Fatal(err)
		}
		if err := istioaux.WaitMutates(ctx, c.Client(), "default", istioaux.HasHold, time.Minute); err != nil {
			t.Fatalf("the webhook never mutated a pod: %v", err)
		}
		runsRelease(t, c, "v"+version)
	}

	start := time.Now()
	if err := h.Install(ctx, name, chart1, values); err != nil {
		t.Fatal(err)
	}
	ready(t, first.Version, 3*time.Minute)
	made, _, err := h.Objects(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm install %s %s: %d objects, Available in %s", first.Chart, first.Version, len(made), time.Since(start).Round(time.Second))
	checkInstalled(t, c, aux)
	t.Run("seed", func(t *testing.T) { seedStory(t, c) })

	t.Run("upgrade", func(t *testing.T) {
		jobsThrough(t, c, func(ctx context.Context) error {
			return h.Upgrade(ctx, name, chart2, values)
		})
		ready(t, next.Version, 5*time.Minute)
	})
	t.Run("rollback", func(t *testing.T) {
		jobsThrough(t, c, func(context.Context) error { return h.Rollback(name, 1) })
		ready(t, first.Version, 5*time.Minute)
		if _, revision, err := h.Objects(name); err != nil || revision != 3 {
			t.Errorf("after the rollback: revision %d (%v), want 3", revision, err)
		}
	})

	if err := h.Uninstall(name); err != nil {
		t.Fatal(err)
	}
	left := func(ctx context.Context) []string {
		var out []string
		for _, o := range made {
			if _, err := h.Live(ctx, o); !apierrors.IsNotFound(err) {
				out = append(out, describe(o))
			}
		}
		return out
	}
	if err := poll.Until(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		return len(left(ctx)) == 0, nil
	}); err != nil {
		t.Fatalf("after helm uninstall, still there: %v (%v)", left(ctx), err)
	}
	t.Logf("helm uninstall: none of the %d objects left", len(made))
}

// runsRelease checks that every container of every pod of istio-aux runs
// an image of the release tagged version, pinned by digest, as its chart
// says.
func runsRelease(t *testing.T, c *cluster.Cluster, version string) {
	t.Helper()
	pods, err := c.Client().CoreV1().Pods(istioaux.SystemNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, ctr := range p.Spec.Containers {
			if !strings.Contains(ctr.Image, ":"+version+"@sha256:") {
				t.Errorf("%s/%s runs %s, want the release %s's image", p.Name, ctr.Name, ctr.Image, version)
			}
		}
	}
}

// describe names an object as kubectl does: kind/namespace/name.
func describe(o *unstructured.Unstructured) string {
	return strings.Join([]string{o.GetKind(), o.GetNamespace(), o.GetName()}, "/")
}
