package watch

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"

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
		"opted in":           {labels: map[string]string{keys.LabelEnabled: "true"}, want: ScopeAll, selector: "istio-aux.dev/watched!=true"},
		"the legacy label":   {labels: map[string]string{keys.LegacyLabel: keys.LegacyLabelValue}, want: ScopeAll, selector: "istio-aux.dev/watched!=true"},
		"pods one by one":    {labels: map[string]string{keys.LabelEnabled: "pods"}, want: ScopeLabelled, selector: "istio-aux.dev/enabled=true,istio-aux.dev/watched!=true"},
		"pods and legacy":    {labels: map[string]string{keys.LabelEnabled: "pods", keys.LegacyLabel: keys.LegacyLabelValue}, want: ScopeAll, selector: "istio-aux.dev/watched!=true"},
		"opted out":          {labels: map[string]string{keys.LabelEnabled: "false"}, want: ScopeNone},
		"other value":        {labels: map[string]string{keys.LabelEnabled: "True"}, want: ScopeNone},
		"legacy other value": {labels: map[string]string{keys.LegacyLabel: "true"}, want: ScopeNone},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ScopeOf(tc.labels)
			if got != tc.want {
				t.Errorf("ScopeOf = %v, want %v", got, tc.want)
			}
			if got != ScopeNone && got.StraySelector() != tc.selector {
				t.Errorf("stray selector %q, want %q", got.StraySelector(), tc.selector)
			}
			// The watch never leaves out a pod the opt-in rule lets in
			// through its namespace.
			if decision.NamespaceOptedIn(tc.labels) != (got == ScopeAll) {
				t.Errorf("ScopeOf = %v, but NamespaceOptedIn = %v", got, decision.NamespaceOptedIn(tc.labels))
			}
		})
	}
}

// TestScopeAdmits: a pod is served by its namespace's scope alone: a pod
// label opting in does not reach across a namespace that is not in scope.
func TestScopeAdmits(t *testing.T) {
	in := map[string]string{keys.LabelEnabled: "true"}
	cases := []struct {
		s    Scope
		pod  map[string]string
		want bool
	}{
		{ScopeAll, nil, true},
		{ScopeAll, map[string]string{keys.LabelEnabled: "false"}, true}, // decision.OptedIn then says no
		{ScopeLabelled, in, true},
		{ScopeLabelled, nil, false},
		{ScopeLabelled, map[string]string{keys.LabelEnabled: "True"}, false},
		{ScopeNone, in, false},
	}
	for _, tc := range cases {
		if got := tc.s.Admits(tc.pod); got != tc.want {
			t.Errorf("%v.Admits(%v) = %v, want %v", tc.s, tc.pod, got, tc.want)
		}
	}
}

// TestWatchAndStraysSplitEveryPod: the cluster-wide watch's selector and
// the sweep's select every pod exactly once, whatever its label
// keys.LabelWatched says, as the API server reads them (apimachinery's
// labels package: != matches a pod without the key). A pod labelled
// anything but "true" was once in neither, and never quit.
func TestWatchAndStraysSplitEveryPod(t *testing.T) {
	watch, err := labels.Parse(keys.LabelWatched + "=true")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Scope{ScopeAll, ScopeLabelled} {
		strays, err := labels.Parse(s.StraySelector())
		if err != nil {
			t.Fatalf("%v: %v", s, err)
		}
		for _, value := range []string{"<none>", "true", "false", "", "True", "garbage"} {
			pod := labels.Set{keys.LabelEnabled: "true", keys.LabelWatched: value}
			if value == "<none>" {
				delete(pod, keys.LabelWatched)
			}
			if w, st := watch.Matches(pod), strays.Matches(pod); w == st {
				t.Errorf("%v, %s=%q: watch selects it %v, strays %v; want exactly one", s, keys.LabelWatched, value, w, st)
			}
		}
	}
}
