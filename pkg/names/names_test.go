package names_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/test/modroot"
)

// manifests reads every object of config/ and its install folders.
func manifests(t *testing.T) []unstructured.Unstructured {
	t.Helper()
	var out []unstructured.Unstructured
	for _, dir := range []string{"config", "config/nats", "config/standalone", "config/dispatch"} {
		files, err := filepath.Glob(filepath.Join(modroot.Dir(), dir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no manifests in %s: %v", dir, err)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, doc := range bytes.Split(raw, []byte("\n---")) {
				var obj map[string]any
				if err := yaml.Unmarshal(doc, &obj); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				if obj != nil {
					out = append(out, unstructured.Unstructured{Object: obj})
				}
			}
		}
	}
	return out
}

// TestNamesAreTheManifests: every name the plugin looks up is an object
// config/ creates, in the namespace it expects; a rename in config/ that
// the plugin missed fails here, not on a user's cluster.
func TestNamesAreTheManifests(t *testing.T) {
	type key struct{ kind, namespace, name string }
	have := map[key]unstructured.Unstructured{}
	for _, o := range manifests(t) {
		have[key{o.GetKind(), o.GetNamespace(), o.GetName()}] = o
	}
	ns := names.DefaultNamespace
	want := []key{
		{"Namespace", "", ns},
		{"ConfigMap", ns, names.ConfigMap},
		{"MutatingWebhookConfiguration", "", names.WebhookConfiguration},
		{"Secret", ns, names.WebhookSecret},
		{"Service", ns, names.WebhookService},
		{"Deployment", ns, names.WebhookDeployment},
		{"Deployment", ns, names.BridgeDeployment},
		{"Deployment", ns, names.AllInOneDeployment},
		{"StatefulSet", ns, names.NATSStatefulSet},
		{"Service", ns, names.FunctionService},
		{"ServiceAccount", ns, names.FunctionServiceAccount},
		{"ValidatingAdmissionPolicy", "", names.ExecPolicy},
		{"ValidatingAdmissionPolicy", "", names.ExecCommandPolicy},
		{"ValidatingAdmissionPolicyBinding", "", names.ExecBinding},
		{"ValidatingAdmissionPolicyBinding", "", names.ExecCommandBinding},
		{"ValidatingAdmissionPolicyBinding", "", names.ExecCommandLegacyBinding},
	}
	for _, k := range want {
		if _, ok := have[k]; !ok {
			t.Errorf("no %s %s/%s in config/", k.kind, k.namespace, k.name)
		}
	}
	if o := have[key{"Service", ns, names.FunctionService}]; o.GetAPIVersion() != "serving.knative.dev/v1" {
		t.Errorf("%s is %s, want a Knative Service", names.FunctionService, o.GetAPIVersion())
	}
	for _, b := range []string{names.ExecCommandBinding, names.ExecCommandLegacyBinding} {
		o := have[key{"ValidatingAdmissionPolicyBinding", "", b}]
		policy, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
		param, _, _ := unstructured.NestedString(o.Object, "spec", "paramRef", "name")
		paramNS, _, _ := unstructured.NestedString(o.Object, "spec", "paramRef", "namespace")
		if policy != names.ExecCommandPolicy || param != names.ConfigMap || paramNS != ns {
			t.Errorf("binding %s: policy %q, param %s/%s; want %s with %s/%s", b, policy, paramNS, param, names.ExecCommandPolicy, ns, names.ConfigMap)
		}
	}
	components := map[string]string{names.WebhookDeployment: names.ComponentWebhook, names.BridgeDeployment: names.ComponentBridge,
		names.AllInOneDeployment: names.ComponentAllInOne, "istio-aux-dispatch": names.ComponentDispatch}
	for name, component := range components {
		o := have[key{"Deployment", ns, name}]
		labels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		if labels[names.ComponentLabel] != component {
			t.Errorf("Deployment %s: pod label %s=%q, want %q", name, names.ComponentLabel, labels[names.ComponentLabel], component)
		}
	}
}
