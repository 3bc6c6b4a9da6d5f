package istio

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Chart is what Start reads of Istio's istio-discovery chart: its default
// values and the injection templates in files/.
type Chart struct {
	// Defaults are values.yaml's defaults (the chart keeps them under
	// _internal_defaults_do_not_set and merges user values over them).
	Defaults map[string]any
	// Files maps a file name in files/ to its content.
	Files map[string]string
}

// templateFiles maps each injection template name the chart puts in the
// istio-sidecar-injector ConfigMap to the file it reads it from.
var templateFiles = map[string]string{
	"sidecar":      "injection-template.yaml",
	"gateway":      "gateway-injection-template.yaml",
	"grpc-simple":  "grpc-simple.yaml",
	"grpc-agent":   "grpc-agent.yaml",
	"waypoint":     "waypoint.yaml",
	"kube-gateway": "kube-gateway.yaml",
	"agentgateway": "agentgateway.yaml",
}

// LoadChart reads the chart copied into dir by hack/build-istio.sh.
func LoadChart(dir string) (*Chart, error) {
	data, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	var top map[string]any
	if err := yaml.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("chart values: %w", err)
	}
	defaults, ok := top["_internal_defaults_do_not_set"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("chart values: no _internal_defaults_do_not_set")
	}
	c := &Chart{Defaults: defaults, Files: map[string]string{}}
	for name, f := range templateFiles {
		b, err := os.ReadFile(filepath.Join(dir, "files", f))
		switch {
		case errors.Is(err, fs.ErrNotExist) && name != "sidecar":
			continue // a template the release does not ship yet (agentgateway before 1.29)
		case err != nil:
			return nil, err
		}
		c.Files[f] = string(b)
	}
	return c, nil
}

// Values merges overrides, in order, over the chart's defaults, as helm
// merges --set and -f values (maps merge key by key, anything else
// replaces). Nothing passed in is modified.
func (c *Chart) Values(overrides ...map[string]any) map[string]any {
	out := deepCopy(c.Defaults).(map[string]any)
	for _, o := range overrides {
		mergeInto(out, deepCopy(o).(map[string]any))
	}
	return out
}

// InjectorConfigMap is the data of the istio-sidecar-injector ConfigMap the
// chart renders for values v: "values" (the values the templates see, as
// JSON) and "config" (the templates and injection policy, as YAML).
func (c *Chart) InjectorConfigMap(v map[string]any) (map[string]string, error) {
	// The chart scopes the values to what the templates use.
	scoped := pick(v, "global", "sidecarInjectorWebhook", "revision")
	scoped["pilot"] = pick(v, "cni", "env")
	scoped["gateways"] = pick(mapAt(v, "gateways"), "securityContext", "seccompProfile")
	values, err := json.MarshalIndent(scoped, "", "  ")
	if err != nil {
		return nil, err
	}

	webhook := mapAt(v, "sidecarInjectorWebhook")
	defaultTemplates, _ := webhook["defaultTemplates"].([]any)
	if len(defaultTemplates) == 0 {
		defaultTemplates = []any{"sidecar"}
	}
	templates := map[string]any{}
	for name, file := range templateFiles {
		if t, ok := c.Files[file]; ok {
			templates[name] = strings.TrimSpace(t) + "\n"
		}
	}
	for name, t := range mapAt(webhook, "templates") {
		templates[name] = t // the user's templates replace the chart's
	}
	config := map[string]any{
		"defaultTemplates":     defaultTemplates,
		"policy":               mapAt(v, "global", "proxy")["autoInject"],
		"alwaysInjectSelector": cmp.Or[any](webhook["alwaysInjectSelector"], []any{}),
		"neverInjectSelector":  cmp.Or[any](webhook["neverInjectSelector"], []any{}),
		"injectedAnnotations":  cmp.Or[any](webhook["injectedAnnotations"], map[string]any{}),
		// The chart's guard: an istiod too old for these templates fails
		// on this legacy key instead of injecting something wrong.
		"template":  "{{ Template_Version_And_Istio_Version_Mismatched_Check_Installation }}",
		"templates": templates,
	}
	cfg, err := yaml.Marshal(config)
	if err != nil {
		return nil, err
	}
	return map[string]string{"values": string(values), "config": string(cfg)}, nil
}

// MeshConfigMap is the data of the istio ConfigMap (mesh config) the chart
// renders for values v: its mesh defaults with values.meshConfig merged
// over them, and the mesh networks.
func (c *Chart) MeshConfigMap(v map[string]any) (map[string]string, error) {
	global := mapAt(v, "global")
	meshConfig := mapAt(v, "meshConfig")
	ns, _ := global["istioNamespace"].(string)
	root := ns
	if r, _ := meshConfig["rootNamespace"].(string); r != "" {
		root = r
	}
	if tracer := mapAt(global, "proxy")["tracer"]; tracer != "none" {
		return nil, fmt.Errorf("global.proxy.tracer %v: the harness renders only the chart's default, none", tracer)
	}
	if remote, _ := global["remotePilotAddress"].(string); remote != "" {
		return nil, fmt.Errorf("global.remotePilotAddress: a remote control plane is not supported here")
	}
	revision, _ := v["revision"].(string)
	istiod := "istiod"
	if revision != "" {
		istiod += "-" + revision
	}
	defaultConfig := map[string]any{"discoveryAddress": fmt.Sprintf("%s.%s.svc:15012", istiod, ns)}
	if id, _ := global["meshID"].(string); id != "" {
		defaultConfig["meshId"] = id
	}
	variant, _ := mapAt(global, "proxy")["variant"].(string)
	if variant == "" {
		variant, _ = global["variant"].(string)
	}
	if variant != "" {
		defaultConfig["image"] = map[string]any{"imageType": variant}
	}
	mesh := map[string]any{
		"trustDomain":   "cluster.local",
		"rootNamespace": root,
		"defaultConfig": defaultConfig,
	}
	if providers := defaultProviders(v); providers != nil {
		mesh["defaultProviders"] = providers
	}
	mergeInto(mesh, deepCopy(meshConfig).(map[string]any))
	meshYAML, err := yaml.Marshal(mesh)
	if err != nil {
		return nil, err
	}
	networks := "networks: {}\n"
	if n := mapAt(global, "meshNetworks"); len(n) > 0 {
		b, err := yaml.Marshal(map[string]any{"networks": n})
		if err != nil {
			return nil, err
		}
		networks = string(b)
	}
	return map[string]string{"mesh": string(meshYAML), "meshNetworks": networks}, nil
}

// defaultProviders follows the chart: Prometheus metrics (and Stackdriver
// when enabled) unless meshConfig names providers itself.
func defaultProviders(v map[string]any) map[string]any {
	if _, set := mapAt(v, "meshConfig")["defaultProviders"]; set {
		return nil
	}
	v2 := mapAt(v, "telemetry", "v2")
	if mapAt(v, "telemetry")["enabled"] != true || v2["enabled"] != true {
		return nil
	}
	out := map[string]any{}
	var metrics []any
	if mapAt(v2, "prometheus")["enabled"] == true {
		metrics = append(metrics, "prometheus")
	}
	if mapAt(v2, "stackdriver")["enabled"] == true {
		metrics = append(metrics, "stackdriver")
		out["accessLogging"] = []any{"stackdriver"}
	}
	if len(metrics) == 0 {
		return nil
	}
	out["metrics"] = metrics
	return out
}

// mapAt walks nested maps; a missing or non-map step gives an empty map.
func mapAt(m map[string]any, path ...string) map[string]any {
	for _, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			return map[string]any{}
		}
		m = next
	}
	if m == nil {
		return map[string]any{}
	}
	return m
}

func pick(m map[string]any, keys ...string) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// mergeInto merges src into dst: maps key by key, anything else replaces.
func mergeInto(dst, src map[string]any) {
	for k, sv := range src {
		if sm, ok := sv.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeInto(dm, sm)
				continue
			}
		}
		dst[k] = sv
	}
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = deepCopy(e)
		}
		return out
	default:
		return v
	}
}
