//go:build e2e

package node

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// TestCanaryUpgrade: Istio installed by revision (mesh.Canary: namespaces
// select it by the revision tag default or by the revision's own name, no
// istio-injection label anywhere) is upgraded to the next release the way
// Istio's canary upgrade goes, while Jobs run: the new release's istiod
// beside the old as a revision of its own, then the tag moved to it and the
// other namespace relabelled, then the old revision removed. Every pod is
// held by the revision that injected it (its istio.io/rev annotation, its
// release's proxy image), every proxy is quit exactly once through its own
// pilot-agent, and every Job completes: those started before the move with
// the old proxies, those after with the new.
func TestCanaryUpgrade(t *testing.T) {
	m := shared.Use(t, mesh.Canary)
	c, _ := meshCluster(t)
	ctx := context.Background()
	old := m.Istiod
	t.Logf("cluster: %s; upgrading to Istio %s", mesh.ShapeOf(mesh.Canary), mesh.CanaryTo)

	// One namespace selects the tag, one the old revision by name.
	tagged := mesh.Namespace(t, c, "-tag", true, mesh.OptedIn)
	byName := maps.Clone(mesh.OptedIn)
	byName[keys.LabelRevision] = old.Revision()
	named := mesh.Namespace(t, c, "-rev", false, byName)

	// Jobs in flight: their apps train until a moment well after the move.
	until := time.Now().Add(2 * time.Minute).UTC().Format(time.RFC3339)
	inFlight := func(name string) *batchv1.Job {
		return meshJob(name, 2, corev1.RestartPolicyNever, worker(map[string]string{"APP_RUN_UNTIL": until}))
	}
	for _, ns := range []string{tagged, named} {
		mesh.CreateJob(t, c, ns, inFlight("before"))
	}
	// Both pods of each, running: a Job makes its pods one by one, so
	// the pods listed at once may be one (seen in CI, 2026-12-02).
	for _, ns := range []string{tagged, named} {
		mesh.WaitPods(t, c, ns, "before", 2, 2*time.Minute, func(p *corev1.Pod) bool { return running(p, "tensorflow") })
	}

	canary, err := m.StartCanary(ctx, mesh.CanaryTo, mesh.CanaryRevision)
	if err != nil {
		t.Fatal(err)
	}
	if err := canary.Tag(ctx, mesh.DefaultTag); err != nil {
		t.Fatal(err)
	}
	mesh.Relabel(t, c, named, map[string]any{keys.LabelRevision: canary.Revision()})
	// The premise: the first Jobs' apps still run after the move.
	for _, ns := range []string{tagged, named} {
		for _, p := range mesh.Pods(t, c, ns, "before") {
			if !running(&p, "tensorflow") {
				t.Fatalf("%s/%s: the app is no longer running after the move (%s): the Job was not in flight", ns, p.Name, mesh.Describe(p.Status.ContainerStatuses))
			}
		}
	}
	for _, ns := range []string{tagged, named} {
		mesh.CreateJob(t, c, ns, meshJob("after", 2, corev1.RestartPolicyNever, worker(nil)))
	}
	for _, ns := range []string{tagged, named} {
		checkRevisionJob(t, c, ns, "after", canary)
		checkRevisionJob(t, c, ns, "before", old)
	}

	// The old revision goes; the mesh injects by the new one alone.
	if err := m.Retire(canary); err != nil {
		t.Fatal(err)
	}
	mwcs := c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := mwcs.Get(ctx, istio.WebhookConfigurationName+"-"+old.Revision(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the old revision's webhook configuration is still there (%v)", err)
	}
	tag, err := mwcs.Get(ctx, istio.TagWebhookConfigurationName(mesh.DefaultTag), metav1.GetOptions{})
	if err != nil || tag.Labels[keys.LabelRevision] != canary.Revision() {
		t.Errorf("the default tag: %v (labels %v), want it pointing at %s", err, tag.Labels, canary.Revision())
	}
	mesh.CreateJob(t, c, tagged, meshJob("last", 1, corev1.RestartPolicyNever, worker(nil)))
	checkRevisionJob(t, c, tagged, "last", canary)
}

// checkRevisionJob: the Job completes, and each of its pods was injected by
// i's revision with its release's proxy, held, and quit exactly once.
func checkRevisionJob(t *testing.T, c *cluster.Cluster, ns, job string, i *istio.Istiod) {
	t.Helper()
	mesh.WaitJob(t, c, ns, job, batchv1.JobComplete, 4*time.Minute)
	for _, p := range mesh.Pods(t, c, ns, job) {
		what := fmt.Sprintf("%s/%s (Job %s)", ns, p.Name, job)
		if got := p.Annotations[keys.LabelRevision]; got != i.Revision() {
			t.Errorf("%s: injected by revision %q, want %q", what, got, i.Revision())
		}
		if img := cluster.Container(&p, keys.ProxyContainer).Image; img != i.Release().ProxyImage() {
			t.Errorf("%s: proxy image %s, want %s's %s", what, img, i.Release(), i.Release().ProxyImage())
		}
		if !mesh.ProxyFirstWithHold(&p) {
			t.Errorf("%s: containers %v, no hold", what, mesh.ContainerNames(&p))
		}
		mesh.OneEvent(t, c, ns, p.Name, "ProxyQuit")
	}
}
