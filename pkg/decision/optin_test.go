package decision_test

import (
	"testing"

	"github.com/istio-aux/istio-aux/pkg/decision"
)

func TestOptedIn(t *testing.T) {
	on := map[string]string{"istio-aux.dev/enabled": "true"}
	legacy := map[string]string{"io.datastrophic/istio-aux": "enabled"}
	off := map[string]string{}
	tests := []struct {
		name               string
		ns, labels, annots map[string]string
		want               bool
	}{
		{"namespace label", on, nil, nil, true},
		{"legacy namespace label", legacy, nil, nil, true},
		{"legacy label with another value", map[string]string{"io.datastrophic/istio-aux": "true"}, nil, nil, false},
		{"namespace label with another value", map[string]string{"istio-aux.dev/enabled": "yes"}, nil, nil, false},
		{"namespace label false", map[string]string{"istio-aux.dev/enabled": "false"}, nil, nil, false},
		{"unlabelled namespace", off, nil, nil, false},
		{"nil everything", nil, nil, nil, false},
		{"pod label opts in", off, map[string]string{"istio-aux.dev/enabled": "true"}, nil, true},
		{"pod label opts out", on, map[string]string{"istio-aux.dev/enabled": "false"}, nil, false},
		{"pod label opts out of legacy namespace", legacy, map[string]string{"istio-aux.dev/enabled": "false"}, nil, false},
		{"pod annotation opts in", off, nil, map[string]string{"istio-aux.dev/enabled": "true"}, true},
		{"pod annotation opts out", on, nil, map[string]string{"istio-aux.dev/enabled": "false"}, false},
		{"annotation wins over label (in)", off, map[string]string{"istio-aux.dev/enabled": "false"}, map[string]string{"istio-aux.dev/enabled": "true"}, true},
		{"annotation wins over label (out)", on, map[string]string{"istio-aux.dev/enabled": "true"}, map[string]string{"istio-aux.dev/enabled": "false"}, false},
		{"case and blanks tolerated", off, nil, map[string]string{"istio-aux.dev/enabled": " TRUE "}, true},
		{"typo in annotation falls through to label", off, map[string]string{"istio-aux.dev/enabled": "true"}, map[string]string{"istio-aux.dev/enabled": "ture"}, true},
		{"typo in label falls through to namespace", on, map[string]string{"istio-aux.dev/enabled": "nope"}, nil, true},
		{"typo everywhere: namespace decides", off, map[string]string{"istio-aux.dev/enabled": "1"}, map[string]string{"istio-aux.dev/enabled": "yes"}, false},
		{"empty annotation ignored", on, nil, map[string]string{"istio-aux.dev/enabled": ""}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decision.OptedIn(tc.ns, tc.labels, tc.annots); got != tc.want {
				t.Errorf("OptedIn(%v, %v, %v) = %v, want %v", tc.ns, tc.labels, tc.annots, got, tc.want)
			}
			if got := decision.OptInOf(tc.ns, tc.labels, tc.annots); got.OptedIn != tc.want {
				t.Errorf("OptInOf(%v, %v, %v) = %+v, want opted in %v", tc.ns, tc.labels, tc.annots, got, tc.want)
			}
		})
	}
}

func TestNamespaceOptedIn(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{"istio-aux.dev/enabled": "true"}, true},
		{map[string]string{"io.datastrophic/istio-aux": "enabled"}, true},
		{map[string]string{"istio-aux.dev/enabled": "false", "io.datastrophic/istio-aux": "enabled"}, true},
		{map[string]string{"istio-aux.dev/enabled": "True"}, false},
		{nil, false},
	} {
		if got := decision.NamespaceOptedIn(tc.labels); got != tc.want {
			t.Errorf("NamespaceOptedIn(%v) = %v, want %v", tc.labels, got, tc.want)
		}
	}
}

// TestOptInOf: the setting named is the one that decided, so that kubectl
// istio-aux explain points at what to change.
func TestOptInOf(t *testing.T) {
	on := map[string]string{"istio-aux.dev/enabled": "true"}
	legacy := map[string]string{"io.datastrophic/istio-aux": "enabled"}
	both := map[string]string{"istio-aux.dev/enabled": "true", "io.datastrophic/istio-aux": "enabled"}
	pods := map[string]string{"istio-aux.dev/enabled": "pods"}
	yes := map[string]string{"istio-aux.dev/enabled": "true"}
	no := map[string]string{"istio-aux.dev/enabled": "false"}
	typo := map[string]string{"istio-aux.dev/enabled": "ture"}
	tests := map[string]struct {
		ns, labels, annots map[string]string
		want               decision.OptIn
	}{
		"nothing":                            {nil, nil, nil, decision.OptIn{OptedIn: false, Source: decision.SourceNone}},
		"namespace label":                    {on, nil, nil, decision.OptIn{OptedIn: true, Source: decision.SourceNamespaceLabel}},
		"legacy namespace label":             {legacy, nil, nil, decision.OptIn{OptedIn: true, Source: decision.SourceLegacyNamespaceLabel}},
		"both namespace labels: ours named":  {both, nil, nil, decision.OptIn{OptedIn: true, Source: decision.SourceNamespaceLabel}},
		"namespace =pods alone opts nothing": {pods, nil, nil, decision.OptIn{OptedIn: false, Source: decision.SourceNone}},
		"namespace =pods and the pod label":  {pods, yes, nil, decision.OptIn{OptedIn: true, Source: decision.SourcePodLabel}},
		"pod label out of an opted-in ns":    {on, no, nil, decision.OptIn{OptedIn: false, Source: decision.SourcePodLabel}},
		"annotation over label":              {nil, no, yes, decision.OptIn{OptedIn: true, Source: decision.SourcePodAnnotation}},
		"annotation out of an opted-in ns":   {legacy, nil, no, decision.OptIn{OptedIn: false, Source: decision.SourcePodAnnotation}},
		"a typo is passed over":              {on, typo, typo, decision.OptIn{OptedIn: true, Source: decision.SourceNamespaceLabel}},
	}
	for name, tc := range tests {
		if got := decision.OptInOf(tc.ns, tc.labels, tc.annots); got != tc.want {
			t.Errorf("%s: OptInOf = %+v (%s), want %+v (%s)", name, got, got.Source, tc.want, tc.want.Source)
		}
	}
	for s, want := range map[decision.OptInSource]string{decision.SourceNone: "none", decision.SourcePodAnnotation: "pod-annotation",
		decision.SourcePodLabel: "pod-label", decision.SourceNamespaceLabel: "namespace-label", decision.SourceLegacyNamespaceLabel: "legacy-namespace-label"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s, want)
		}
	}
}
