package explain

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// optIn works out the opt-in (pkg/decision's) and whether the webhook and
// the bridge can see the pod: an opt-in neither of them sees does nothing.
func (e *explanation) optIn() {
	p := e.in.Pod
	e.opt = decision.OptInOf(e.nsLabels, p.Labels, p.Annotations)
	o := OptIn{OptedIn: e.opt.OptedIn, Source: e.opt.Source.String(),
		Webhook: webhookSees(e.webhooks(), e.nsLabels, p.Labels), Bridge: bridgeWatches(e.nsLabels, p.Labels)}
	o.Text = e.optInText()
	e.out.OptIn = o
	if !o.OptedIn || o.Bridge || !decision.RunsToCompletion(p.Spec.RestartPolicy) || e.out.Proxy == ProxyNone {
		return
	}
	// Opted in where the bridge does not look: nothing will quit its proxy.
	fix := fmt.Sprintf("kubectl label namespace %s %s=%s", p.Namespace, keys.LabelEnabled, keys.LabelEnabledPods)
	if e.nsLabels[keys.LabelEnabled] == keys.LabelEnabledPods {
		fix = fmt.Sprintf("kubectl label pod -n %s %s %s=true (exactly)", p.Namespace, p.Name, keys.LabelEnabled)
	}
	e.problem(fmt.Sprintf("opted in by its %s, but the bridge does not watch it: it watches namespaces labelled %s=true "+
		"(or %s=%s) and, in namespaces labelled %s=%s, only pods labelled %s=true; the exec policy refuses quits "+
		"outside them too. Its proxy will not be quit: %s",
		sourceWords(e.opt.Source), keys.LabelEnabled, keys.LegacyLabel, keys.LegacyLabelValue,
		keys.LabelEnabled, keys.LabelEnabledPods, keys.LabelEnabled, fix), fix)
}

// webhooks are the live configuration's webhooks, or, without one, the
// webhooks the webhook's reconciler would write (their selectors are what
// matters here).
func (e *explanation) webhooks() []admissionregistrationv1.MutatingWebhook {
	if c := e.in.Webhook.Configuration; c != nil {
		return c.Webhooks
	}
	return admission.Webhooks(e.in.SystemNamespace, admissionregistrationv1.WebhookClientConfig{})
}

// webhookSees reports whether the API server calls one of whs for a pod
// with these labels in a namespace with these: selectors see labels only.
func webhookSees(whs []admissionregistrationv1.MutatingWebhook, nsLabels, podLabels map[string]string) bool {
	for _, w := range whs {
		if matches(w.NamespaceSelector, nsLabels) && matches(w.ObjectSelector, podLabels) {
			return true
		}
	}
	return false
}

// matches is the API server's reading of a webhook selector: nil matches
// everything, an invalid one nothing.
func matches(sel *metav1.LabelSelector, set map[string]string) bool {
	if sel == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(set))
}

// bridgeWatches reports whether the bridge serves a pod with these labels
// in a namespace with these (watch.ScopeOf and Scope.Admits).
func bridgeWatches(nsLabels, podLabels map[string]string) bool {
	return watch.ScopeOf(nsLabels).Admits(podLabels)
}

func (e *explanation) optInText() string {
	p := e.in.Pod
	switch s := e.opt.Source; {
	case s == decision.SourceNone && e.nsLabels[keys.LabelEnabled] == keys.LabelEnabledPods:
		return fmt.Sprintf("no: namespace %s lets its pods opt in one by one (%s=%s), and this one has no label %s=true",
			p.Namespace, keys.LabelEnabled, keys.LabelEnabledPods, keys.LabelEnabled)
	case s == decision.SourceNone:
		return fmt.Sprintf("no: neither namespace %s nor the pod opts in (label the namespace %s=true, or %s=%s and the pod %s=true)",
			p.Namespace, keys.LabelEnabled, keys.LabelEnabled, keys.LabelEnabledPods, keys.LabelEnabled)
	case e.opt.OptedIn:
		return "yes, by " + sourceWords(s)
	default:
		return "no: opted out by " + sourceWords(s)
	}
}

// sourceWords names the setting that decided, with its value.
func sourceWords(s decision.OptInSource) string {
	switch s {
	case decision.SourcePodAnnotation:
		return "pod annotation " + keys.AnnotationEnabled + " (which overrides its labels and its namespace)"
	case decision.SourcePodLabel:
		return "pod label " + keys.LabelEnabled + " (which overrides its namespace)"
	case decision.SourceNamespaceLabel:
		return "namespace label " + keys.LabelEnabled + "=true"
	case decision.SourceLegacyNamespaceLabel:
		return "namespace label " + keys.LegacyLabel + "=" + keys.LegacyLabelValue + " (the reference implementation's)"
	}
	return "nothing"
}
