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
