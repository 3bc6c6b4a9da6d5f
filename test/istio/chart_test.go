package istio

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"sigs.k8s.io/yaml"
)

func testChart(t *testing.T) *Chart {
	t.Helper()
	c, err := LoadChart(filepath.Join("testdata", "chart"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestValuesMerge(t *testing.T) {
	c := testChart(t)
	override := map[string]any{"global": map[string]any{"proxy": map[string]any{"image": "x/y:z"}}, "revisionTags": []any{"a"}}
	v := c.Values(override)
	cases := map[string]struct {
		path []string
		key  string
		want any
	}{
		"overridden leaf":            {[]string{"global", "proxy"}, "image", "x/y:z"},
		"sibling kept":               {[]string{"global", "proxy"}, "autoInject", "enabled"},
		"unrelated default kept":     {[]string{"global"}, "hub", "example.test/hub"},
		"new key added":              {nil, "revisionTags", []any{"a"}},
		"defaults under meshConfig":  {[]string{"meshConfig"}, "enablePrometheusMerge", true},
		"sidecarInjector list value": {[]string{"sidecarInjectorWebhook"}, "defaultTemplates", []any{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := mapAt(v, tc.path...)[tc.key]; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%v.%s = %#v, want %#v", tc.path, tc.key, got, tc.want)
			}
		})
	}
	if mapAt(c.Defaults, "global", "proxy")["image"] != "proxyv2" {
		t.Error("Values modified the chart's defaults")
	}
	mapAt(v, "global", "proxy")["image"] = "changed"
	if mapAt(override, "global", "proxy")["image"] != "x/y:z" {
		t.Error("the merged values share maps with the overrides")
	}
}

func TestInjectorConfigMap(t *testing.T) {
	c := testChart(t)
	cases := map[string]struct {
		overrides        map[string]any
		defaultTemplates []any
		sidecar          string
	}{
		"chart defaults": {
			defaultTemplates: []any{"sidecar"},
			sidecar:          "# injection-template\nspec: {}\n",
		},
		"user templates replace the chart's": {
			overrides:        map[string]any{"sidecarInjectorWebhook": map[string]any{"templates": map[string]any{"sidecar": "mine"}, "defaultTemplates": []any{"sidecar", "extra"}}},
			defaultTemplates: []any{"sidecar", "extra"},
			sidecar:          "mine",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := c.InjectorConfigMap(c.Values(harnessValues("false"), tc.overrides))
			if err != nil {
				t.Fatal(err)
			}
			var values map[string]any
			if err := json.Unmarshal([]byte(data["values"]), &values); err != nil {
				t.Fatalf("values are not JSON: %v", err)
			}
			if got := keys(values); !reflect.DeepEqual(got, []string{"gateways", "global", "pilot", "revision", "sidecarInjectorWebhook"}) {
				t.Errorf("values keys = %v", got)
			}
			if got := keys(mapAt(values, "pilot")); !reflect.DeepEqual(got, []string{"cni", "env"}) {
				t.Errorf("pilot keys = %v", got)
			}
			if got := keys(mapAt(values, "gateways")); !reflect.DeepEqual(got, []string{"seccompProfile", "securityContext"}) {
				t.Errorf("gateways keys = %v", got)
			}
			if got := mapAt(values, "pilot", "env")["ENABLE_NATIVE_SIDECARS"]; got != "false" {
				t.Errorf("pilot.env.ENABLE_NATIVE_SIDECARS = %v", got)
			}
			var config map[string]any
			if err := yaml.Unmarshal([]byte(data["config"]), &config); err != nil {
				t.Fatalf("config is not YAML: %v", err)
			}
			if got := config["defaultTemplates"]; !reflect.DeepEqual(got, tc.defaultTemplates) {
				t.Errorf("defaultTemplates = %v, want %v", got, tc.defaultTemplates)
			}
			if config["policy"] != "enabled" {
				t.Errorf("policy = %v", config["policy"])
			}
			templates := mapAt(config, "templates")
			if got := templates["sidecar"]; got != tc.sidecar {
				t.Errorf("sidecar template = %q, want %q", got, tc.sidecar)
			}
			for name := range templateFiles {
				if templates[name] == nil {
					t.Errorf("template %s missing", name)
				}
			}
		})
	}
}

func TestMeshConfigMap(t *testing.T) {
	c := testChart(t)
	cases := map[string]struct {
		overrides map[string]any
		want      map[string]any // top-level mesh keys checked
		wantErr   bool
	}{
		"harness install": {
			overrides: harnessValues("false"),
			want: map[string]any{
				"rootNamespace":         "istio-system",
				"trustDomain":           "cluster.local",
				"enablePrometheusMerge": true,
				"defaultProviders":      map[string]any{"metrics": []any{"prometheus"}},
				"defaultConfig": map[string]any{
					"discoveryAddress": "istiod.istio-system.svc:15012",
					"interceptionMode": "NONE",
				},
			},
		},
		"user providers win": {
			overrides: map[string]any{"meshConfig": map[string]any{"defaultProviders": map[string]any{"metrics": []any{"otel"}}}},
			want:      map[string]any{"defaultProviders": map[string]any{"metrics": []any{"otel"}}},
		},
		"root namespace from meshConfig": {
			overrides: map[string]any{"meshConfig": map[string]any{"rootNamespace": "mesh-root"}},
			want:      map[string]any{"rootNamespace": "mesh-root"},
		},
		"tracers are not rendered": {
			overrides: map[string]any{"global": map[string]any{"proxy": map[string]any{"tracer": "zipkin"}}},
			wantErr:   true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := c.MeshConfigMap(c.Values(tc.overrides))
			if tc.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var mesh map[string]any
			if err := yaml.Unmarshal([]byte(data["mesh"]), &mesh); err != nil {
				t.Fatal(err)
			}
			for k, want := range tc.want {
				if !reflect.DeepEqual(mesh[k], want) {
					t.Errorf("mesh.%s = %#v, want %#v", k, mesh[k], want)
				}
			}
			if data["meshNetworks"] != "networks: {}\n" {
				t.Errorf("meshNetworks = %q", data["meshNetworks"])
			}
		})
	}
}

// TestRealChart reads the chart hack/build-istio.sh copied, when it is
// there, to catch a chart layout this package no longer understands.
func TestRealChart(t *testing.T) {
	if err := Built(); err != nil {
		t.Skip(err)
	}
	c, err := LoadChart(ChartDir())
	if err != nil {
		t.Fatal(err)
	}
	v := c.Values(harnessValues("false"))
	if _, err := c.InjectorConfigMap(v); err != nil {
		t.Error(err)
	}
	if _, err := c.MeshConfigMap(v); err != nil {
		t.Error(err)
	}
	if got := mapAt(v, "sidecarInjectorWebhook")["reinvocationPolicy"]; got != "Never" {
		t.Errorf("reinvocationPolicy = %v", got)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
