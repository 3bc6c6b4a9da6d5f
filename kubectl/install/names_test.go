package install_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/kubectl/install"
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
	ns := install.DefaultNamespace
	want := []key{
		{"Namespace", "", ns},
		{"ConfigMap", ns, install.ConfigMap},
		{"MutatingWebhookConfiguration", "", install.WebhookConfiguration},
		{"Secret", ns, install.WebhookSecret},
		{"Service", ns, install.WebhookService},
		{"Deployment", ns, install.WebhookDeployment},
		{"Deployment", ns, install.BridgeDeployment},
		{"Deployment", ns, install.AllInOneDeployment},
		{"StatefulSet", ns, install.NATSStatefulSet},
		{"Service", ns, install.FunctionService},
		{"ServiceAccount", ns, install.FunctionServiceAccount},
		{"ValidatingAdmissionPolicy", "", install.ExecPolicy},
		{"ValidatingAdmissionPolicy", "", install.ExecCommandPolicy},
		{"ValidatingAdmissionPolicyBinding", "", install.ExecBinding},
		{"ValidatingAdmissionPolicyBinding", "", install.ExecCommandBinding},
		{"ValidatingAdmissionPolicyBinding", "", install.ExecCommandLegacyBinding},
	}
	for _, k := range want {
		if _, ok := have[k]; !ok {
			t.Errorf("no %s %s/%s in config/", k.kind, k.namespace, k.name)
		}
	}
	if o := have[key{"Service", ns, install.FunctionService}]; o.GetAPIVersion() != "serving.knative.dev/v1" {
		t.Errorf("%s is %s, want a Knative Service", install.FunctionService, o.GetAPIVersion())
	}
	for _, b := range []string{install.ExecCommandBinding, install.ExecCommandLegacyBinding} {
		o := have[key{"ValidatingAdmissionPolicyBinding", "", b}]
		policy, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
		param, _, _ := unstructured.NestedString(o.Object, "spec", "paramRef", "name")
		paramNS, _, _ := unstructured.NestedString(o.Object, "spec", "paramRef", "namespace")
		if policy != install.ExecCommandPolicy || param != install.ConfigMap || paramNS != ns {
			t.Errorf("binding %s: policy %q, param %s/%s; want %s with %s/%s", b, policy, paramNS, param, install.ExecCommandPolicy, ns, install.ConfigMap)
		}
	}
	components := map[string]string{install.WebhookDeployment: install.ComponentWebhook, install.BridgeDeployment: install.ComponentBridge,
		install.AllInOneDeployment: install.ComponentAllInOne, "istio-aux-dispatch": install.ComponentDispatch}
	for name, component := range components {
		o := have[key{"Deployment", ns, name}]
		labels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		if labels[install.ComponentLabel] != component {
			t.Errorf("Deployment %s: pod label %s=%q, want %q", name, install.ComponentLabel, labels[install.ComponentLabel], component)
		}
	}
}
