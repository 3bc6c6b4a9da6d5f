package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	pkgreconciler "knative.dev/pkg/reconciler"
	"knative.dev/pkg/system"
	certresources "knative.dev/pkg/webhook/certificates/resources"

	"github.com/istio-aux/istio-aux/webhook/admission"
)

// reconciler is both the admission controller (Admit, in admission.go) and
// the leader-aware reconciler of the MutatingWebhookConfiguration, as
// knative.dev/pkg's webhook/configmaps is; its requests come through Server.
type reconciler struct {
	pkgreconciler.LeaderAwareFuncs

	key        types.NamespacedName
	secretName string
	// disableNamespaceOwnership: see webhook.Options.
	disableNamespaceOwnership bool

	client       kubernetes.Interface
	mwhLister    admissionlisters.MutatingWebhookConfigurationLister
	secretLister corelisters.SecretLister
	namespaces   admission.Namespaces

	config  atomic.Pointer[admission.Config]
	metrics *metrics
}

var (
	_ controller.Reconciler     = (*reconciler)(nil)
	_ pkgreconciler.LeaderAware = (*reconciler)(nil)
)

// Reconcile implements controller.Reconciler: whatever the key, it brings the
// one MutatingWebhookConfiguration up to date with the serving certificate.
func (r *reconciler) Reconcile(ctx context.Context, key string) error {
	if !r.IsLeaderFor(r.key) {
		return controller.NewSkipKey(key)
	}
	secret, err := r.secretLister.Secrets(system.Namespace()).Get(r.secretName)
	if err != nil {
		return fmt.Errorf("reading secret %s/%s: %w", system.Namespace(), r.secretName, err)
	}
	caCert, ok := secret.Data[certresources.CACert]
	if !ok {
		// The certificates controller has not filled it yet; its update
		// requeues us.
		return fmt.Errorf("secret %s/%s has no %q yet", system.Namespace(), r.secretName, certresources.CACert)
	}
	return r.reconcileMutatingWebhook(ctx, caCert)
}

func (r *reconciler) reconcileMutatingWebhook(ctx context.Context, caCert []byte) error {
	logger := logging.FromContext(ctx)
	current, err := r.mwhLister.Get(r.key.Name)
	if err != nil {
		return fmt.Errorf("reading mutatingwebhookconfiguration %s: %w", r.key.Name, err)
	}
	want := current.DeepCopy()
	if !r.disableNamespaceOwnership {
		// Owned by the system namespace, so uninstalling it removes the
		// configuration instead of leaving pods calling a missing service.
		ns, err := r.client.CoreV1().Namespaces().Get(ctx, system.Namespace(), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading namespace %s: %w", system.Namespace(), err)
		}
		ref := *metav1.NewControllerRef(ns, corev1.SchemeGroupVersion.WithKind("Namespace"))
		ref.Controller = ptr.To(false)
		want.OwnerReferences = []metav1.OwnerReference{ref}
	}
	for i := range want.Webhooks {
		wh := &want.Webhooks[i]
		if wh.ClientConfig.Service == nil && wh.ClientConfig.URL == nil {
			return errors.New("webhook " + wh.Name + " has neither a service nor a URL")
		}
		admission.SetDefaults(wh, admission.Path)
		wh.ClientConfig.CABundle = caCert
	}
	if equality.Semantic.DeepEqual(current, want) {
		logger.Debug("MutatingWebhookConfiguration is current")
		return nil
	}
	if _, err := r.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, want, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating mutatingwebhookconfiguration %s: %w", r.key.Name, err)
	}
	logger.Infow("Updated MutatingWebhookConfiguration", "name", r.key.Name)
	return nil
}
