package istio

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/webhook/admission/admissiontest"
)

// The charts as hack/build-istio.sh copies them: the tests skip until it
// has (make e2e's Istio stage runs them, after the build).
func requireCharts(t *testing.T, r Release) {
	t.Helper()
	for _, f := range []string{filepath.Join(r.ChartDir(), "Chart.yaml"), filepath.Join(r.CNIChartDir(), "Chart.yaml")} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("Istio %s's charts are not built (hack/build-istio.sh %s): %v", r, r.ModFile(), err)
		}
	}
}

// render is the chart as Start renders it for opts.
func render(t *testing.T, opts Options, extra map[string]any) (values map[string]any, webhook *admissionregistrationv1.MutatingWebhookConfiguration, render func(name string) *admissionregistrationv1.MutatingWebhookConfiguration, objs map[string]string) {
	t.Helper()
	if opts.NativeSidecars == "" {
		opts.NativeSidecars = "false"
	}
	v := chartValues(opts, "https://127.0.0.1:1234/inject", []byte("PEM"))
	mergeInto(v, extra)
	rendered, err := Render(opts.Release.ChartDir(), "istiod"+suffix(opts.Revision), Namespace, "v1.36.3", v)
	if err != nil {
		t.Fatal(err)
	}
	objs = map[string]string{}
	for _, o := range rendered {
		objs[o.GetKind()+"/"+o.GetName()] = ""
		if o.GetKind() == "ConfigMap" {
			data, _, _ := unstructuredMap(o.Object, "data")
			for k, val := range data {
				objs[o.GetKind()+"/"+o.GetName()+"/"+k] = val.(string)
			}
		}
	}
	get := func(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
		t.Helper()
		mwc, err := webhookFrom(rendered, name)
		if err != nil {
			t.Fatal(err)
		}
		return mwc
	}
	return v, get(WebhookConfigurationName + suffix(opts.Revision)), get, objs
}

func unstructuredMap(obj map[string]any, key string) (map[string]any, bool, error) {
	m, ok := obj[key].(map[string]any)
	return m, ok, nil
}

// TestRenderedWebhooks: which of the chart's webhooks call istiod for a pod
// with these labels in a namespace with these labels, for the default
// revision, a revision, and a revision's default tag: a pod is injected
// once, by exactly one webhook, and only where its namespace or it asks.
func TestRenderedWebhooks(t *testing.T) {
	requireCharts(t, Main)
	_, def, _, _ := render(t, Options{}, nil)
	values, canary, get, objs := render(t, Options{Revision: "canary"}, map[string]any{"revisionTags": []any{"default"}})
	tag := get(TagWebhookConfigurationName("default"))
	if values["revision"] != "canary" {
		t.Errorf("revision %v", values["revision"])
	}
	for _, want := range []string{"ConfigMap/istio-canary", "ConfigMap/istio-sidecar-injector-canary", "Deployment/istiod-canary"} {
		if _, ok := objs[want]; !ok {
			t.Errorf("the chart rendered no %s", want)
		}
	}
	for _, mwc := range []*admissionregistrationv1.MutatingWebhookConfiguration{def, canary, tag} {
		for _, w := range mwc.Webhooks {
			if *w.ClientConfig.URL != "https://127.0.0.1:1234/inject" || string(w.ClientConfig.CABundle) != "PEM" {
				t.Errorf("%s %s: client config %s %q", mwc.Name, w.Name, *w.ClientConfig.URL, w.ClientConfig.CABundle)
			}
			if *w.FailurePolicy != admissionregistrationv1.Fail || len(w.Rules) != 1 || w.Rules[0].Operations[0] != admissionregistrationv1.Create || w.Rules[0].Resources[0] != "pods" {
				t.Errorf("%s %s: failurePolicy %s, rules %+v", mwc.Name, w.Name, *w.FailurePolicy, w.Rules)
			}
		}
	}
	if tag.Labels["istio.io/rev"] != "canary" || tag.Labels["istio.io/tag"] != "default" {
		t.Errorf("tag's labels %v", tag.Labels)
	}
	cases := map[string]struct {
		ns, pod           map[string]string
		def, canary, dtag []string
	}{
		"namespace istio-injection=enabled": {ns: map[string]string{"istio-injection": "enabled"},
			def: []string{"namespace.sidecar-injector.istio.io"}, dtag: []string{"namespace.sidecar-injector.istio.io"}},
		"namespace enabled, pod opts out":        {ns: map[string]string{"istio-injection": "enabled"}, pod: map[string]string{"sidecar.istio.io/inject": "false"}},
		"namespace disabled":                     {ns: map[string]string{"istio-injection": "disabled"}},
		"pod label inject=true, plain namespace": {pod: map[string]string{"sidecar.istio.io/inject": "true"}, def: []string{"object.sidecar-injector.istio.io"}, dtag: []string{"object.sidecar-injector.istio.io"}},
		"namespace istio.io/rev=default": {ns: map[string]string{"istio.io/rev": "default"},
			def: []string{"rev.namespace.sidecar-injector.istio.io"}, dtag: []string{"rev.namespace.sidecar-injector.istio.io"}},
		"pod istio.io/rev=default": {pod: map[string]string{"istio.io/rev": "default"},
			def: []string{"rev.object.sidecar-injector.istio.io"}, dtag: []string{"rev.object.sidecar-injector.istio.io"}},
		"namespace istio.io/rev=canary":               {ns: map[string]string{"istio.io/rev": "canary"}, canary: []string{"rev.namespace.sidecar-injector.istio.io"}},
		"namespace istio.io/rev=canary, injection on": {ns: map[string]string{"istio.io/rev": "canary", "istio-injection": "enabled"}, def: []string{"namespace.sidecar-injector.istio.io"}, dtag: []string{"namespace.sidecar-injector.istio.io"}},
		"pod istio.io/rev=canary":                     {pod: map[string]string{"istio.io/rev": "canary"}, canary: []string{"rev.object.sidecar-injector.istio.io"}},
		"namespace istio.io/rev=other (no such tag)":  {ns: map[string]string{"istio.io/rev": "other"}},
		"nothing labelled":                            {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, c := range []struct {
				mwc  *admissionregistrationv1.MutatingWebhookConfiguration
				want []string
			}{{def, tc.def}, {canary, tc.canary}, {tag, tc.dtag}} {
				got := admissiontest.Called(t, c.mwc.Webhooks, tc.ns, tc.pod)
				if !slices.Equal(got, c.want) {
					t.Errorf("%s: webhooks called %v, want %v", c.mwc.Name, got, c.want)
				}
			}
		})
	}
}

// TestRenderedInjector: what the harness's values make of the injector's
// and istiod's configuration, in each shape of mesh: no capture without
// CNI; capture and the CNI template with it; on OpenShift, the platform's
// profile (CNI by multus, istiod told its platform).
func TestRenderedInjector(t *testing.T) {
	requireCharts(t, Main)
	cases := map[string]struct {
		opts         Options
		interception string // the mesh config's, "" for Istio's default
		cni          map[string]any
		env          string
	}{
		"classic":   {opts: Options{}, interception: "NONE", cni: map[string]any{"enabled": false, "provider": "default"}},
		"CNI":       {opts: Options{CNI: true}, cni: map[string]any{"enabled": true, "provider": "default"}},
		"OpenShift": {opts: Options{CNI: true, Platform: "openshift"}, cni: map[string]any{"enabled": true, "provider": "multus"}, env: "PLATFORM=openshift"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.opts.NativeSidecars = "false"
			v := chartValues(tc.opts, "https://127.0.0.1:1234/inject", []byte("PEM"))
			rendered, err := Render(Main.ChartDir(), "istiod", Namespace, "v1.36.3", v)
			if err != nil {
				t.Fatal(err)
			}
			cm := Find(rendered, "ConfigMap", "istio-sidecar-injector")
			mesh := Find(rendered, "ConfigMap", "istio")
			if cm == nil || mesh == nil {
				t.Fatal("no injector or mesh ConfigMap")
			}
			var injector map[string]any
			if err := json.Unmarshal([]byte(cm.Object["data"].(map[string]any)["values"].(string)), &injector); err != nil {
				t.Fatal(err)
			}
			if got := mapAt(injector, "pilot", "cni"); got["enabled"] != tc.cni["enabled"] || got["provider"] != tc.cni["provider"] {
				t.Errorf("injector's pilot.cni = %v, want %v", got, tc.cni)
			}
			var meshConfig map[string]any
			if err := yaml.Unmarshal([]byte(mesh.Object["data"].(map[string]any)["mesh"].(string)), &meshConfig); err != nil {
				t.Fatal(err)
			}
			if got, _ := mapAt(meshConfig, "defaultConfig")["interceptionMode"].(string); got != tc.interception {
				t.Errorf("mesh interceptionMode %q, want %q", got, tc.interception)
			}
			env, args, err := deploymentCommand(rendered, "istiod")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(env, "REVISION=default") || args[0] != "discovery" {
				t.Errorf("istiod env %v, args %v", env, args)
			}
			var injectorValues map[string]any
			_ = json.Unmarshal([]byte(cm.Object["data"].(map[string]any)["values"].(string)), &injectorValues)
			for _, image := range []string{"proxy", "proxy_init"} {
				if got := mapAt(injectorValues, "global", image)["image"]; got != ProxyImage {
					t.Errorf("global.%s.image = %v, want %s", image, got, ProxyImage)
				}
			}
			if tc.env != "" && !slices.Contains(env, tc.env) {
				t.Errorf("istiod env %v lacks %s", env, tc.env)
			}
			for _, e := range harnessEnv(env, "/k") {
				if strings.HasPrefix(e, "INJECTION_WEBHOOK_CONFIG_NAME=") && e != "INJECTION_WEBHOOK_CONFIG_NAME=" {
					t.Errorf("istiod would patch webhook configurations: %s", e)
				}
			}
		})
	}
	if _, err := Start(t.Context(), nil, Options{Platform: "openshift"}); err == nil || !strings.Contains(err.Error(), "CNI") {
		t.Errorf("OpenShift without CNI: %v", err)
	}
}

// TestRenderedCNI: the CNI node agent as the harness installs it: the
// chart's DaemonSet with the image built here, chained into the node's
// network, with the repair controller as Istio ships it.
func TestRenderedCNI(t *testing.T) {
	requireCharts(t, Main)
	rendered, err := Render(Main.CNIChartDir(), "istio-cni", Namespace, "v1.36.3", map[string]any{"image": CNIImage})
	if err != nil {
		t.Fatal(err)
	}
	ds := Find(rendered, "DaemonSet", CNIDaemonSet)
	cm := Find(rendered, "ConfigMap", "istio-cni-config")
	if ds == nil || cm == nil {
		t.Fatal("no DaemonSet or ConfigMap")
	}
	b, _ := yaml.Marshal(ds.Object)
	for _, want := range []string{"image: " + CNIImage, "path: /opt/cni/bin", "path: /etc/cni/net.d", "path: /var/run/istio-cni"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("DaemonSet lacks %q", want)
		}
	}
	data := cm.Object["data"].(map[string]any)
	for k, want := range map[string]string{"CHAINED_CNI_PLUGIN": "true", "REPAIR_ENABLED": "true", "REPAIR_REPAIR_PODS": "true", "REPAIR_DELETE_PODS": "false"} {
		if data[k] != want {
			t.Errorf("istio-cni-config %s = %v, want %s", k, data[k], want)
		}
	}
}
