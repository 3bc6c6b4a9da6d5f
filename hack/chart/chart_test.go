package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/hack/internal/unpin"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
)

const root = "../.."

var chartDir = filepath.Join(root, "charts", "istio-aux")

// TestChartIsGenerated: charts/istio-aux is what hack/chart writes from
// config/ now; an edit of config/ (or of the chart) not followed by go run
// ./hack/chart fails here.
func TestChartIsGenerated(t *testing.T) {
	want, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Read(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range slices.Sorted(maps.Keys(want)) {
		if !bytes.Equal(got[n], want[n]) {
			t.Errorf("charts/istio-aux/%s is not what hack/chart writes: go run ./hack/chart", n)
		}
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			t.Errorf("charts/istio-aux/%s is not hack/chart's: go run ./hack/chart", n)
		}
	}
}

// TestChartRendersConfig: each value of the chart renders exactly the
// objects of the config/ directories it stands for (with Helm's own
// engine, as helm install renders it): the defaults are config/ and
// config/nats/, the release's istio-aux.yaml before ko resolves its images.
func TestChartRendersConfig(t *testing.T) {
	nats, single := []string{"config", "config/nats"}, []string{"config", "config/nats-single"}
	tests := map[string]struct {
		values    map[string]any
		dirs      []string
		openshift bool
		dashboard bool
	}{
		"defaults":                {nil, nats, false, false},
		"standalone":              {map[string]any{"standalone": true}, []string{"config/standalone"}, false, false},
		"one NATS server":         {map[string]any{"nats": map[string]any{"servers": 1}}, single, false, false},
		"your own NATS":           {map[string]any{"nats": map[string]any{"servers": 0}}, []string{"config"}, false, false},
		"dispatchers":             {map[string]any{"dispatch": true}, append(slices.Clone(nats), "config/dispatch"), false, false},
		"openshift":               {map[string]any{"openshift": true}, nats, true, false},
		"monitoring":              {map[string]any{"monitoring": true}, append(slices.Clone(nats), "config/monitoring"), false, true},
		"standalone on openshift": {map[string]any{"standalone": true, "openshift": true}, []string{"config/standalone"}, true, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := istio.Render(chartDir, "istio-aux", "istio-aux", "", tc.values)
			if err != nil {
				t.Fatal(err)
			}
			want := load(t, tc.openshift, tc.dirs...)
			if tc.dashboard {
				want = append(want, dashboard(t))
			}
			compare(t, got, want)
		})
	}
}

// TestChartLints: helm lint --strict's checks (Helm's own rules), at the
// defaults and for each shape: no error and no warning.
func TestChartLints(t *testing.T) {
	for _, vals := range []map[string]any{nil, {"standalone": true}, {"nats": map[string]any{"servers": 1}}, {"monitoring": true, "openshift": true}} {
		l := lint.RunAll(chartDir, vals, "istio-aux")
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev { // helm lint --strict fails on these
				t.Errorf("helm lint %v: %v", vals, m)
			}
		}
	}
}

// load is the objects of every manifest in dirs, as kubectl apply -f
// would read them (unpinned, if openshift).
func load(t *testing.T, openshift bool, dirs ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, d := range dirs {
		paths, err := manifests(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range paths {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if openshift {
				var b bytes.Buffer
				if err := unpin.Unpin(bytes.NewReader(raw), &b); err != nil {
					t.Fatal(err)
				}
				raw = b.Bytes()
			}
			out = append(out, decode(t, raw)...)
		}
	}
	return out
}

func decode(t *testing.T, raw []byte) []*unstructured.Unstructured {
	t.Helper()
	out, err := cluster.DecodeManifests(raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dashboard is the ConfigMap config/monitoring's kustomization generates.
func dashboard(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	json, err := os.ReadFile(filepath.Join(root, "config/monitoring/dashboards/istio-aux.json"))
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "istio-aux-dashboard", "namespace": "istio-aux", "labels": map[string]any{
			"grafana_dashboard": "1", "app.kubernetes.io/name": "istio-aux", "app.kubernetes.io/component": "monitoring"}},
		"data": map[string]any{"istio-aux.json": string(json)},
	}}
}

func key(u *unstructured.Unstructured) string {
	return u.GetAPIVersion() + "/" + u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// compare fails unless got and want hold the same objects, field for field.
func compare(t *testing.T, got, want []*unstructured.Unstructured) {
	t.Helper()
	byKey := map[string]*unstructured.Unstructured{}
	for _, u := range got {
		if _, dup := byKey[key(u)]; dup {
			t.Errorf("rendered twice: %s", key(u))
		}
		byKey[key(u)] = u
	}
	if len(want) < 5 {
		t.Fatalf("only %d objects expected: the test lost its grip", len(want))
	}
	for _, w := range want {
		g, ok := byKey[key(w)]
		if !ok {
			t.Errorf("not rendered: %s", key(w))
			continue
		}
		delete(byKey, key(w))
		if !equality.Semantic.DeepEqual(normal(t, g), normal(t, w)) {
			gb, _ := yaml.Marshal(g.Object)
			wb, _ := yaml.Marshal(w.Object)
			t.Errorf("%s differs:\nrendered:\n%s\nconfig/:\n%s", key(w), gb, wb)
		}
	}
	for k := range byKey {
		t.Errorf("rendered, not in config/: %s", k)
	}
}

// normal is u's object through JSON, so that numbers compare alike.
func normal(t *testing.T, u *unstructured.Unstructured) map[string]any {
	t.Helper()
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
