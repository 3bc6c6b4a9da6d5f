package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// Names of the three webhooks of names.WebhookConfiguration. There are
// three because selectors can only OR across webhooks, and can match
// labels but not annotations (a pod opted out by annotation still reaches
// Admit, which then skips it).
const (
	WebhookEnabled = "enabled.istio-aux.dev"
	WebhookLegacy  = "legacy.istio-aux.dev"
	WebhookPods    = "pods.istio-aux.dev"
)

// Webhooks returns the webhooks of the MutatingWebhookConfiguration, calling
// clientConfig (a service reference in a cluster, a URL for local and e2e
// runs against an API server with no cluster network). It is what config/
// declares, and what the e2e harness and the tests install.
func Webhooks(systemNamespace string, clientConfig admissionregistrationv1.WebhookClientConfig) []admissionregistrationv1.MutatingWebhook {
	notSystem := metav1.LabelSelectorRequirement{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{systemNamespace},
	}
	// No objectSelector on the namespace webhooks: a pod labelled
	// istio-aux.dev/enabled=false may still opt in by annotation (the
	// annotation wins, see decision.OptedIn), and only Admit can read that.
	whs := []admissionregistrationv1.MutatingWebhook{{
		Name: WebhookEnabled,
		NamespaceSelector: &metav1.LabelSelector{
			MatchLabels:      map[string]string{keys.LabelEnabled: "true"},
			MatchExpressions: []metav1.LabelSelectorRequirement{notSystem},
		},
	}, {
		Name: WebhookLegacy,
		NamespaceSelector: &metav1.LabelSelector{
			// Exclude namespaces that also carry the new label: the first
			// webhook already handles them, and the API server would call
			// both.
			MatchLabels: map[string]string{keys.LegacyLabel: keys.LegacyLabelValue},
			MatchExpressions: []metav1.LabelSelectorRequirement{notSystem, {
				Key: keys.LabelEnabled, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"},
			}},
		},
	}, {
		Name: WebhookPods,
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			notSystem,
			{Key: keys.LabelEnabled, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}},
			{Key: keys.LegacyLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{keys.LegacyLabelValue}},
		}},
		ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{keys.LabelEnabled: "true"}},
	}}
	for i := range whs {
		whs[i].ClientConfig = *clientConfig.DeepCopy()
		SetDefaults(&whs[i], Path)
	}
	return whs
}

// SetDefaults makes a webhook safe and current: the reconciler owns its
// rules, failure policy and side effects; timeout, reinvocation and review
// versions are defaults a user may override in the YAML. Selectors and the
// client config's service or URL belong to the YAML.
func SetDefaults(wh *admissionregistrationv1.MutatingWebhook, path string) {
	scope := admissionregistrationv1.NamespacedScope
	wh.Rules = []admissionregistrationv1.RuleWithOperations{{
		// CREATE only: a webhook on UPDATE could block Job controllers from
		// removing finalizers, and the annotation only matters at injection.
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: &scope,
		},
	}}
	// Fail: a pod of an opted-in namespace (or labelled in) is not let in
	// without the hold while no replica answers, as Istio's own injector
	// does. The selectors above keep every other pod out of the webhook's
	// reach, so istio-aux can never block those. Let in unmutated instead
	// (Ignore), the pods created while a dead node's replica kept its
	// endpoint (until the node is marked unreachable, ~50 s) started
	// before their proxy: the race istio-aux exists to prevent. A refused
	// pod is created again by its controller (Job, JobSet, the training
	// operators: each retries), once a replica answers.
	wh.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	wh.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassNone)
	if wh.TimeoutSeconds == nil {
		wh.TimeoutSeconds = ptr.To(int32(DefaultTimeout.Seconds()))
	}
	if wh.ReinvocationPolicy == nil {
		wh.ReinvocationPolicy = ptr.To(admissionregistrationv1.NeverReinvocationPolicy)
	}
	if len(wh.AdmissionReviewVersions) == 0 {
		wh.AdmissionReviewVersions = []string{"v1"}
	}
	if wh.ClientConfig.Service != nil {
		wh.ClientConfig.Service.Path = ptr.To(path)
	}
}
