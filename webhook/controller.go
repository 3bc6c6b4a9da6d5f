package webhook

import (
	"context"
	"net/http"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	kubeclient "knative.dev/pkg/client/injection/kube/client"
	mwhinformer "knative.dev/pkg/client/injection/kube/informers/admissionregistration/v1/mutatingwebhookconfiguration"
	nsinformer "knative.dev/pkg/client/injection/kube/informers/core/v1/namespace"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	secretinformer "knative.dev/pkg/injection/clients/namespacedkube/informers/core/v1/secret"
	"knative.dev/pkg/logging"
	pkgreconciler "knative.dev/pkg/reconciler"
	"knative.dev/pkg/system"
	"knative.dev/pkg/webhook"

	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// NewController is an injection.ControllerConstructor: the reconciler of the
// MutatingWebhookConfiguration names.WebhookConfiguration, and the
// admission it answers on admission.Path, which a Server found in ctx (WithServer)
// serves. The mode comes from ConfigMap names.ConfigMap through cmw and
// changes without a restart.
func NewController(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
	logger := logging.FromContext(ctx)
	client := kubeclient.Get(ctx)
	mwhInformer := mwhinformer.Get(ctx)
	secretInformer := secretinformer.Get(ctx)
	nsInformer := nsinformer.Get(ctx)

	secretName := names.WebhookSecret
	disableOwnership := false
	if opts := webhook.GetOptions(ctx); opts != nil {
		if opts.SecretName != "" {
			secretName = opts.SecretName
		}
		disableOwnership = opts.DisableNamespaceOwnership
	}
	if v := webhook.DisableNamespaceOwnershipFromEnv(); v != nil {
		disableOwnership = *v
	}

	key := types.NamespacedName{Name: names.WebhookConfiguration}
	r := &reconciler{
		LeaderAwareFuncs: pkgreconciler.LeaderAwareFuncs{
			// Reconcile the singleton configuration on becoming leader.
			PromoteFunc: func(bkt pkgreconciler.Bucket, enq func(pkgreconciler.Bucket, types.NamespacedName)) error {
				enq(bkt, key)
				return nil
			},
		},
		key:                       key,
		secretName:                secretName,
		disableNamespaceOwnership: disableOwnership,
		client:                    client,
		mwhLister:                 mwhInformer.Lister(),
		secretLister:              secretInformer.Lister(),
		namespaces:                cachedNamespaces{lister: nsInformer.Lister(), client: client},
		metrics:                   processMetrics(),
	}
	r.config.Store(admission.DefaultConfig())
	watchConfig(logger, cmw, r)

	const queueName = "IstioAuxWebhook"
	impl := controller.NewContext(ctx, r, controller.ControllerOptions{WorkQueueName: queueName, Logger: logger.Named(queueName)})
	// Whatever changed, the singleton key is what gets reconciled.
	for _, h := range []struct {
		informer cache.SharedInformer
		filter   func(any) bool
	}{
		{mwhInformer.Informer(), controller.FilterWithName(names.WebhookConfiguration)},
		{secretInformer.Informer(), controller.FilterWithNameAndNamespace(system.Namespace(), secretName)},
	} {
		// It fails only on an informer already stopped: nothing to serve.
		if _, err := h.informer.AddEventHandler(cache.FilteringResourceEventHandler{
			FilterFunc: h.filter,
			Handler:    controller.HandleAll(impl.Enqueue),
		}); err != nil {
			logger.Fatalw("watching the webhook's objects", zap.Error(err))
		}
	}
	if s := serverFrom(ctx); s != nil {
		// Admit reads namespaces and the mode; the server needs its
		// certificate: answer once the informers have synced (until then
		// requests wait, as with knative's webhook).
		synced := make(chan struct{})
		go func() {
			if cache.WaitForCacheSync(ctx.Done(), nsInformer.Informer().HasSynced, secretInformer.Informer().HasSynced) {
				close(synced)
			}
		}()
		mux := http.NewServeMux()
		mux.Handle(admission.Path, newHandler(r.Review, synced, r.metrics))
		s.start(ctx, mux, secretInformer.Lister())
	}
	return impl
}

// watchConfig keeps r's config current. A missing ConfigMap means defaults;
// an invalid one keeps the previous config, so a typo cannot change the mode.
func watchConfig(logger *zap.SugaredLogger, cmw configmap.Watcher, r *reconciler) {
	observe := func(cm *corev1.ConfigMap) {
		cfg, err := admission.NewConfigFromConfigMap(cm)
		if err != nil {
			logger.Errorw("Keeping the previous configuration", zap.Error(err), zap.String("mode", string(r.mode())))
			return
		}
		if old := r.config.Swap(cfg); old.Mode != cfg.Mode {
			logger.Infow("Webhook mode changed", zap.String("from", string(old.Mode)), zap.String("to", string(cfg.Mode)))
		}
	}
	if dw, ok := cmw.(configmap.DefaultingWatcher); ok {
		dw.WatchWithDefault(corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: names.ConfigMap, Namespace: system.Namespace()}}, observe)
		return
	}
	cmw.Watch(names.ConfigMap, observe)
}
