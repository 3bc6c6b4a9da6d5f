package watch

import (
	"context"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// StraysSelector selects the pods the sweep lists: those the cluster-wide
// watch (keys.LabelWatched=true) does not, whatever their label says:
// without it, and with any other value ("false", empty, anything a user
// wrote). A label selector's != matches a pod without the key too
// (k8s.io/apimachinery labels.Requirement.Matches, NotEquals), so the two
// selectors split every pod between them: none is in both, none in
// neither.
const StraysSelector = keys.LabelWatched + "!=true"

// sweep finds the opted-in pods the cluster-wide watch does not bring
// (those not labelled keys.LabelWatched=true) and has their namespaces watched until
// they are gone (strayWatches). It reads metadata only, in pages, from the
// API server's watch cache: one request for the whole cluster however many
// namespaces are opted in, and no pod outside the opt-in is decoded (only
// its name, labels and annotations cross the wire, and are dropped). The
// watcher sweeps once it has synced and then every resync period: the bound
// on how long a pod that reached an opted-in namespace not labelled
// waits to be seen.
func (w *Watcher) sweep(ctx context.Context) {
	found := 0
	namespaces := map[string]struct{}{}
	err := w.lists.Strays(ctx, StraysSelector, func(m *metav1.PartialObjectMetadata) {
		nsLabels, ok := w.namespaceLabels(m.Namespace)
		if !ok || !Serves(nsLabels, m.Labels, m.Annotations) {
			return
		}
		found++
		namespaces[m.Namespace] = struct{}{}
	})
	if err != nil {
		w.m.Sweeps.WithLabelValues("error").Inc()
		if ctx.Err() == nil {
			logging.FromContext(ctx).Warnw("Sweeping for opted-in pods not labelled by the webhook; the next resync tries again", zap.Error(err))
		}
		return
	}
	w.m.Sweeps.WithLabelValues("ok").Inc()
	w.m.Strays.Set(float64(found))
	for ns := range namespaces {
		w.strays.lookIn(ns)
	}
	if found > 0 {
		logging.FromContext(ctx).Infow("Found opted-in pods not labelled by the webhook", zap.Int("pods", found), zap.Int("namespaces", len(namespaces)))
	}
}
