package config

import (
	"fmt"
	"maps"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// decode converts d strictly into a T.
func decode[T any](t *testing.T, d doc) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(d.obj.Object, out, true); err != nil {
		t.Fatalf("%s: %v", d, err)
	}
	return out
}

// webhookConfiguration is config/'s, by the name the webhook's reconciler
// looks it up by.
func webhookConfiguration(t *testing.T) *admissionv1.MutatingWebhookConfiguration {
	t.Helper()
	d := find(t, loadDocs(t, "config", nil), "MutatingWebhookConfiguration", "istio-aux-webhook")
	return decode[admissionv1.MutatingWebhookConfiguration](t, d)
}

func TestWebhookConfigurationRunsBeforeIstio(t *testing.T) {
	mwc := webhookConfiguration(t)
	// The API server calls mutating configurations sorted by name.
	for _, istio := range []string{"istio-revision-tag-default", "istio-sidecar-injector", "istio-sidecar-injector-canary"} {
		if mwc.Name >= istio {
			t.Errorf("%q does not sort before Istio's %q", mwc.Name, istio)
		}
	}
	if len(mwc.Webhooks) != 3 {
		t.Fatalf("%d webhooks, want 3", len(mwc.Webhooks))
	}
	for _, w := range mwc.Webhooks {
		svc := w.ClientConfig.Service
		switch {
		case svc == nil || svc.Name != "istio-aux-webhook" || svc.Namespace != "istio-aux" || svc.Path == nil || *svc.Path != "/mutate-pods":
			t.Errorf("%s: clientConfig.service %+v, want istio-aux/istio-aux-webhook /mutate-pods", w.Name, svc)
		case w.FailurePolicy == nil || *w.FailurePolicy != admissionv1.Fail:
			// Scoped by the selectors (TestWebhookSelectorsAgreeWithOptIn):
			// a pod outside the opt-in never reaches a webhook that could fail.
			t.Errorf("%s: failurePolicy must be Fail: an opted-in pod must not start without the hold", w.Name)
		case w.SideEffects == nil || *w.SideEffects != admissionv1.SideEffectClassNone:
			t.Errorf("%s: sideEffects must be None", w.Name)
		case w.TimeoutSeconds == nil || *w.TimeoutSeconds > 3:
			t.Errorf("%s: timeoutSeconds must be at most 3", w.Name)
		case w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != admissionv1.NeverReinvocationPolicy:
			t.Errorf("%s: reinvocationPolicy must be Never", w.Name)
		case len(w.Rules) != 1 || fmt.Sprint(w.Rules[0].Operations, w.Rules[0].Resources, w.Rules[0].APIGroups) != "[CREATE] [pods] []":
			t.Errorf("%s: rules %+v, want CREATE of core pods only", w.Name, w.Rules)
		}
	}
}

// TestWebhookSelectorsAgreeWithOptIn checks the three webhooks' selectors
// against decision.OptedIn over every combination of the opt-in labels and
// the pod annotation: a pod that is opted in reaches exactly one webhook
// (the annotation wins over the pod label, so a pod labelled "false" but
// annotated "true" must still reach it), no pod reaches two, and a pod of a
// namespace that is not opted in reaches none unless its label opts it in.
// Selectors cannot see annotations: a pod opted in by the annotation alone
// in a namespace that is not is out of the webhook's reach (documented in
// 403-webhook-configuration.yaml).
func TestWebhookSelectorsAgreeWithOptIn(t *testing.T) {
	mwc := webhookConfiguration(t)
	type sel struct{ ns, obj labels.Selector }
	sels := map[string]sel{}
	for _, w := range mwc.Webhooks {
		ns, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		obj := labels.Everything()
		if w.ObjectSelector != nil {
			if obj, err = metav1.LabelSelectorAsSelector(w.ObjectSelector); err != nil {
				t.Fatalf("%s: %v", w.Name, err)
			}
		}
		sels[w.Name] = sel{ns, obj}
	}
	values := func(key string, vs ...string) []map[string]string {
		out := []map[string]string{{}}
		for _, v := range vs {
			out = append(out, map[string]string{key: v})
		}
		return out
	}
	cases := 0
	for _, name := range []string{"default", "team-a", "istio-aux"} {
		for _, nsNew := range values(keys.LabelEnabled, "true", "false") {
			for _, nsOld := range values(keys.LegacyLabel, keys.LegacyLabelValue, "disabled") {
				for _, pod := range values(keys.LabelEnabled, "true", "false") {
					for _, ann := range values(keys.AnnotationEnabled, "true", "false") {
						cases++
						nsLabels := map[string]string{"kubernetes.io/metadata.name": name}
						maps.Copy(nsLabels, nsNew)
						maps.Copy(nsLabels, nsOld)
						var matched []string
						for w, s := range sels {
							if s.ns.Matches(labels.Set(nsLabels)) && s.obj.Matches(labels.Set(pod)) {
								matched = append(matched, w)
							}
						}
						desc := fmt.Sprintf("namespace %v, pod labels %v, annotations %v: webhooks %v", nsLabels, pod, ann, matched)
						reachable := decision.NamespaceOptedIn(nsLabels) || pod[keys.LabelEnabled] == "true"
						switch {
						case len(matched) > 1:
							t.Errorf("%s: called more than once", desc)
						case name == "istio-aux" && len(matched) > 0:
							t.Errorf("%s: istio-aux's own namespace must be excluded", desc)
						case name != "istio-aux" && reachable && decision.OptedIn(nsLabels, pod, ann) && len(matched) != 1:
							t.Errorf("%s: opted in but not sent to the webhook", desc)
						case !reachable && len(matched) > 0:
							t.Errorf("%s: neither namespace nor pod label opted in, yet called", desc)
						}
					}
				}
			}
		}
	}
	if cases != 3*3*3*3*3 {
		t.Fatalf("ran %d cases", cases)
	}
}

// The e2e harness installs admission.Webhooks (with a URL); clusters get
// config/. Both must route exactly the same pods to the webhook.
func TestWebhookSelectorsMatchWebhookPackage(t *testing.T) {
	mwc := webhookConfiguration(t)
	want := admission.Webhooks("istio-aux", admissionv1.WebhookClientConfig{})
	if len(mwc.Webhooks) != len(want) {
		t.Fatalf("config/ has %d webhooks, admission.Webhooks %d", len(mwc.Webhooks), len(want))
	}
	for i, w := range mwc.Webhooks {
		if w.Name != want[i].Name {
			t.Errorf("webhook %d: config/ %q, admission.Webhooks %q", i, w.Name, want[i].Name)
		}
		for kind, pair := range map[string][2]*metav1.LabelSelector{
			"namespaceSelector": {w.NamespaceSelector, want[i].NamespaceSelector},
			"objectSelector":    {w.ObjectSelector, want[i].ObjectSelector},
		} {
			if got, exp := canonical(t, pair[0]), canonical(t, pair[1]); got != exp {
				t.Errorf("%s: %s\n config/:          %q\n admission.Webhooks: %q", w.Name, kind, got, exp)
			}
		}
	}
}

// canonical renders a selector with its requirements sorted, so that two
// selectors compare equal exactly when they select the same objects.
func canonical(t *testing.T, sel *metav1.LabelSelector) string {
	t.Helper()
	if sel == nil {
		return "<everything>"
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return s.String()
}
