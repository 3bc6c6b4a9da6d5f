package istio

import (
	"encoding/base64"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestWebhookConfiguration(t *testing.T) {
	c := testChart(t)
	remote := map[string]any{"istiodRemote": map[string]any{
		"injectionURL":      "https://127.0.0.1:1234/inject",
		"injectionCABundle": base64.StdEncoding.EncodeToString([]byte("PEM")),
	}}
	mwc, err := webhookConfiguration(c.Values(remote))
	if err != nil {
		t.Fatal(err)
	}
	if mwc.Name != "istio-sidecar-injector" {
		t.Errorf("name = %s", mwc.Name)
	}
	byName := map[string]admissionregistrationv1.MutatingWebhook{}
	for _, w := range mwc.Webhooks {
		byName[w.Name] = w
		if *w.ClientConfig.URL != "https://127.0.0.1:1234/inject" || string(w.ClientConfig.CABundle) != "PEM" {
			t.Errorf("%s: client config %s %q", w.Name, *w.ClientConfig.URL, w.ClientConfig.CABundle)
		}
		if *w.FailurePolicy != admissionregistrationv1.Fail || *w.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy {
			t.Errorf("%s: failurePolicy %s, reinvocationPolicy %s", w.Name, *w.FailurePolicy, *w.ReinvocationPolicy)
		}
		if len(w.Rules) != 1 || w.Rules[0].Operations[0] != admissionregistrationv1.Create || w.Rules[0].Resources[0] != "pods" {
			t.Errorf("%s: rules %+v", w.Name, w.Rules)
		}
	}
	// Which webhook(s) call istiod for a pod with these labels in a
	// namespace with these labels: a pod is injected once, by exactly one.
	cases := map[string]struct {
		ns, pod map[string]string
		want    []string
	}{
		"namespace istio-injection=enabled":      {ns: map[string]string{"istio-injection": "enabled"}, want: []string{"namespace.sidecar-injector.istio.io"}},
		"namespace enabled, pod opts out":        {ns: map[string]string{"istio-injection": "enabled"}, pod: map[string]string{"sidecar.istio.io/inject": "false"}},
		"namespace disabled":                     {ns: map[string]string{"istio-injection": "disabled"}},
		"pod label inject=true, plain namespace": {pod: map[string]string{"sidecar.istio.io/inject": "true"}, want: []string{"object.sidecar-injector.istio.io"}},
		"namespace istio.io/rev=default":         {ns: map[string]string{"istio.io/rev": "default"}, want: []string{"rev.namespace.sidecar-injector.istio.io"}},
		"pod istio.io/rev=default":               {pod: map[string]string{"istio.io/rev": "default"}, want: []string{"rev.object.sidecar-injector.istio.io"}},
		"nothing labelled":                       {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, w := range mwc.Webhooks {
				if matches(t, w.NamespaceSelector, tc.ns) && matches(t, w.ObjectSelector, tc.pod) {
					got = append(got, w.Name)
				}
			}
			if len(got) != len(tc.want) || (len(got) == 1 && got[0] != tc.want[0]) {
				t.Errorf("webhooks called = %v, want %v", got, tc.want)
			}
		})
	}

	if _, err := webhookConfiguration(c.Values()); err == nil {
		t.Error("no error without an injection URL")
	}
	auto := c.Values(remote, map[string]any{"sidecarInjectorWebhook": map[string]any{"enableNamespacesByDefault": true}})
	if mwc, err := webhookConfiguration(auto); err != nil || len(mwc.Webhooks) != 5 {
		t.Errorf("enableNamespacesByDefault: %v, %d webhooks, want 5", err, len(mwc.Webhooks))
	}
}

func matches(t *testing.T, s *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel.Matches(labels.Set(l))
}
