package watch

import (
	"testing"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
)

func TestScopeOf(t *testing.T) {
	cases := map[string]struct {
		labels   map[string]string
		want     Scope
		selector string
	}{
		"no labels":          {want: ScopeNone},
		"opted in":           {labels: map[string]string{keys.LabelEnabled: "true"}, want: ScopeAll},
		"the legacy label":   {labels: map[string]string{keys.LegacyLabel: keys.LegacyLabelValue}, want: ScopeAll},
		"pods one by one":    {labels: map[string]string{keys.LabelEnabled: "pods"}, want: ScopeLabelled, selector: "istio-aux.dev/enabled=true"},
		"pods and legacy":    {labels: map[string]string{keys.LabelEnabled: "pods", keys.LegacyLabel: keys.LegacyLabelValue}, want: ScopeAll},
		"opted out":          {labels: map[string]string{keys.LabelEnabled: "false"}, want: ScopeNone},
		"other value":        {labels: map[string]string{keys.LabelEnabled: "True"}, want: ScopeNone},
		"legacy other value": {labels: map[string]string{keys.LegacyLabel: "true"}, want: ScopeNone},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ScopeOf(tc.labels)
			if got != tc.want || got.LabelSelector() != tc.selector {
				t.Errorf("ScopeOf = %v (selector %q), want %v (%q)", got, got.LabelSelector(), tc.want, tc.selector)
			}
			// The watch never leaves out a pod the opt-in rule lets in
			// through its namespace.
			if decision.NamespaceOptedIn(tc.labels) != (got == ScopeAll) {
				t.Errorf("ScopeOf = %v, but NamespaceOptedIn = %v", got, decision.NamespaceOptedIn(tc.labels))
			}
		})
	}
}
