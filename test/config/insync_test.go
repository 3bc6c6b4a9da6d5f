//go:build e2e

package config

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/poll"
)

// TestConfigInSyncAfterTheWebhookRan is GitOps without drift: config/ is
// applied server-side (as Argo CD with ServerSideApply=true, Flux, or
// kubectl apply --server-side do), the real webhook runs under its own
// ServiceAccount until it has issued its certificate into its Secret,
// written the caBundles and left its MutatingWebhookConfiguration unchanged
// for five polls, and then every shipped object, applied again as a
// server-side dry-run, is exactly the live object: what `kubectl diff
// --server-side` shows, and what a GitOps tool would otherwise report
// OutOfSync forever, or fight the webhook over. (Argo CD's own diff code,
// gitops-engine, does not build on this Go; its client-side diff is not
// run: docs/install.md, "GitOps".)
func TestConfigInSyncAfterTheWebhookRan(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, a := start(ctx, t, cluster.Options{})
	docs := applyConfig(ctx, t, a)
	runWebhook(ctx, t, c)

	// Its reconciler runs again on every change it makes: wait until the
	// configuration has stayed as it is for a resync's worth of events.
	mwc := c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations()
	var last string
	var still int
	err := poll.Until(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		m, err := mwc.Get(ctx, "istio-aux-webhook", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if m.ResourceVersion == last {
			still++
		} else {
			last, still = m.ResourceVersion, 0
		}
		return still >= 5, nil
	})
	if err != nil {
		t.Fatalf("the webhook configuration kept changing: %v", err)
	}

	for _, d := range docs {
		live, err := a.live(ctx, d)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		desired, err := a.applied(ctx, d, true)
		if err != nil {
			t.Fatalf("%s: applying again (dry-run): %v", d, err)
		}
		if diff := cmp.Diff(comparable(live), comparable(desired)); diff != "" {
			t.Errorf("%s drifts: applying config/ again would change it (-live +applied):\n%s", d, diff)
		}
	}
	t.Logf("%d objects of config/ in sync after the webhook ran", len(docs))
}

// comparable is obj without what an apply never sets and every write
// changes: the field managers' bookkeeping.
func comparable(obj *unstructured.Unstructured) map[string]any {
	o := obj.DeepCopy()
	unstructured.RemoveNestedField(o.Object, "metadata", "managedFields")
	unstructured.RemoveNestedField(o.Object, "metadata", "resourceVersion")
	return o.Object
}
