package install_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/kubectl/install"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

func TestConfigOf(t *testing.T) {
	cm := func(data map[string]string) *corev1.ConfigMap { return &corev1.ConfigMap{Data: data} }
	tests := map[string]struct {
		cm       *corev1.ConfigMap
		want     install.Config
		problems []string // substrings, one per problem, in order
	}{
		"missing": {nil, install.Config{Mode: admission.ModeHold}, nil},
		"empty":   {cm(nil), install.Config{Found: true, Mode: admission.ModeHold}, nil},
		"every key": {cm(map[string]string{"sidecars": "vault-agent, fluent-bit", "quit-native": "true", "mode": "native", "quit-command": "curl -sf",
			"nats-url": " nats://nats:4222 "}),
			install.Config{Found: true, Mode: admission.ModeNative, QuitCommand: "curl -sf", NATSURL: "nats://nats:4222",
				Decision: decision.Options{ExtraSidecars: []string{"vault-agent", "fluent-bit"}, QuitNative: true}}, nil},
		"bad values are named, the good ones kept": {cm(map[string]string{"sidecars": "Vault_Agent", "quit-native": "true", "mode": "hld", "quit-command": " "}),
			install.Config{Found: true, Mode: admission.ModeHold, QuitCommand: " ", Decision: decision.Options{QuitNative: true}},
			[]string{`key quit-command: " ": empty`, `key sidecars: "Vault_Agent": sidecar name "Vault_Agent"`, `mode "hld"`}},
		"quit-native that is no boolean": {cm(map[string]string{"quit-native": "yes"}), install.Config{Found: true, Mode: admission.ModeHold},
			[]string{"key quit-native"}},
	}
	for name, tc := range tests {
		got := install.ConfigOf(tc.cm)
		problems := got.Problems
		got.Problems = nil
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s: (-want +got)\n%s", name, d)
		}
		if len(problems) != len(tc.problems) {
			t.Errorf("%s: problems %q, want %d", name, problems, len(tc.problems))
			continue
		}
		for i, p := range tc.problems {
			if !strings.Contains(problems[i], p) {
				t.Errorf("%s: problem %d is %q, want it to say %q", name, i, problems[i], p)
			}
		}
	}
}

func TestEndpointsOf(t *testing.T) {
	ep := func(ready *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	terminating := discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}}
	slices := []discoveryv1.EndpointSlice{
		{Endpoints: []discoveryv1.Endpoint{ep(ptr.To(true)), ep(ptr.To(false)), terminating}},
		{Endpoints: []discoveryv1.Endpoint{ep(nil)}},
	}
	if got := install.EndpointsOf(slices); got != (install.Endpoints{Ready: 2, Total: 3}) {
		t.Errorf("EndpointsOf = %+v, want 2 ready of 3 (an unset condition is ready, a terminating endpoint is not counted)", got)
	}
}
