package istio

import (
	"encoding/base64"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// WebhookConfigurationName is the MutatingWebhookConfiguration the chart
// creates for the default revision installed in istio-system. The API
// server calls mutating webhooks sorted by configuration name, so
// istio-aux's webhook must sort before it.
const WebhookConfigurationName = "istio-sidecar-injector"

// Namespace is where istiod and its ConfigMaps live.
const Namespace = "istio-system"

// webhookConfiguration is the chart's MutatingWebhookConfiguration for
// values v, with the injection URL and CA bundle (base64 PEM) the chart takes
// from istiodRemote.injectionURL and injectionCABundle (its way of pointing the
// API server at an istiod outside the cluster). For the default revision it
// declares four webhooks: two for the istio.io/rev label (on the namespace,
// or on the pod), and the legacy two, namespace label istio-injection=enabled
// or pod label sidecar.istio.io/inject=true.
func webhookConfiguration(v map[string]any) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	remote := mapAt(v, "istiodRemote")
	url, _ := remote["injectionURL"].(string)
	caBundle, _ := remote["injectionCABundle"].(string)
	if url == "" || caBundle == "" {
		return nil, fmt.Errorf("istiodRemote.injectionURL and injectionCABundle must be set for an istiod outside the cluster")
	}
	ca, err := base64.StdEncoding.DecodeString(caBundle)
	if err != nil {
		return nil, fmt.Errorf("istiodRemote.injectionCABundle is not base64: %w", err)
	}
	revision, _ := v["revision"].(string)
	if revision != "" {
		return nil, fmt.Errorf("revision %q: only the default revision is rendered", revision)
	}
	policy, _ := mapAt(v, "sidecarInjectorWebhook")["reinvocationPolicy"].(string)
	if policy == "" {
		policy = string(admissionregistrationv1.NeverReinvocationPolicy)
	}
	core := func(prefix string, ns, obj []metav1.LabelSelectorRequirement) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:         prefix + "sidecar-injector.istio.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url), CABundle: ca},
			SideEffects:  ptr.To(admissionregistrationv1.SideEffectClassNone),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.ReinvocationPolicyType(policy)),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{MatchExpressions: ns},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: obj},
		}
	}
	in := func(key string, values ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpIn, Values: values}
	}
	notIn := func(key string, values ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpNotIn, Values: values}
	}
	absent := func(key string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpDoesNotExist}
	}
	const rev, legacy, inject = "istio.io/rev", "istio-injection", "sidecar.istio.io/inject"
	webhooks := []admissionregistrationv1.MutatingWebhook{
		core("rev.namespace.", []metav1.LabelSelectorRequirement{in(rev, "default"), absent(legacy)},
			[]metav1.LabelSelectorRequirement{notIn(inject, "false")}),
		core("rev.object.", []metav1.LabelSelectorRequirement{absent(rev), absent(legacy)},
			[]metav1.LabelSelectorRequirement{notIn(inject, "false"), in(rev, "default")}),
		core("namespace.", []metav1.LabelSelectorRequirement{in(legacy, "enabled")},
			[]metav1.LabelSelectorRequirement{notIn(inject, "false")}),
		core("object.", []metav1.LabelSelectorRequirement{absent(legacy), absent(rev)},
			[]metav1.LabelSelectorRequirement{in(inject, "true"), absent(rev)}),
	}
	if mapAt(v, "sidecarInjectorWebhook")["enableNamespacesByDefault"] == true {
		webhooks = append(webhooks, core("auto.",
			[]metav1.LabelSelectorRequirement{absent(legacy), absent(rev),
				notIn("kubernetes.io/metadata.name", "kube-system", "kube-public", "kube-node-lease", "local-path-storage")},
			[]metav1.LabelSelectorRequirement{absent(inject), absent(rev)}))
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: WebhookConfigurationName, Labels: chartLabels(map[string]string{"app": "sidecar-injector"})},
		Webhooks:   webhooks,
	}, nil
}

// chartLabels are the labels the chart puts on what it installs for the
// default revision, plus extra.
func chartLabels(extra map[string]string) map[string]string {
	l := map[string]string{
		"istio.io/rev":                "default",
		"operator.istio.io/component": "Pilot",
		"app.kubernetes.io/name":      "istiod",
		"app.kubernetes.io/part-of":   "istio",
	}
	for k, v := range extra {
		l[k] = v
	}
	return l
}
