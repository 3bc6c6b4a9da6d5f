package knative

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// TestVersionsMatchTools keeps each Release's serving version and
// TraefikVersion equal to what the tools modules' files pin (and
// hack/build-knative.sh therefore builds), and Newest's knative.dev/pkg
// equal to istio-aux's own.
func TestVersionsMatchTools(t *testing.T) {
	type tooled struct{ tool, modfile, module, want string }
	pins := []tooled{{"traefik", "go.mod", "github.com/traefik/traefik/v3", TraefikVersion}}
	for _, r := range Releases {
		pins = append(pins, tooled{"knative", r.ModFile, "knative.dev/serving", r.Serving})
	}
	for _, tc := range pins {
		v, err := cluster.ToolsVersionIn(tc.tool, tc.modfile, tc.module)
		if err != nil {
			t.Fatal(err)
		}
		if v != tc.want {
			t.Errorf("hack/tools/%s/%s requires %s %s, the harness says %s", tc.tool, tc.modfile, tc.module, v, tc.want)
		}
	}
	if Newest.ModFile != "go.mod" {
		t.Errorf("Newest is built from %s, want the tools module's go.mod", Newest.ModFile)
	}
	pin := regexp.MustCompile(`(?m)^\s*knative\.dev/pkg (\S+)`)
	var pkgs []string
	for _, f := range []string{"go.mod", "hack/tools/knative/go.mod"} {
		b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), f))
		if err != nil {
			t.Fatal(err)
		}
		m := pin.FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no knative.dev/pkg requirement", f)
		}
		pkgs = append(pkgs, string(m[1]))
	}
	if pkgs[0] != pkgs[1] {
		t.Errorf("istio-aux requires knative.dev/pkg %s, Knative Serving %s builds with %s: move both together", pkgs[0], Newest.Serving, pkgs[1])
	}
}

// TestFor: each cluster gets the newest release that starts on it, and
// none older than the oldest release's minimum.
func TestFor(t *testing.T) {
	for version, want := range map[string]string{
		"v1.36.3": Newest.Serving, "v1.34.0": Newest.Serving, "v1.33.13": R117.Serving,
		"v1.31.14": R117.Serving, "v1.30.14": R117.Serving, "v1.29.15": "", "1.31": "",
	} {
		r, ok := For(version)
		if ok != (want != "") || r.Serving != want {
			t.Errorf("For(%q) = %v, %v; want %q", version, r, ok, want)
		}
	}
	for i := 1; i < len(Releases); i++ {
		if Releases[i].MinKubernetesMinor >= Releases[i-1].MinKubernetesMinor {
			t.Errorf("Releases not newest first: %v before %v", Releases[i-1], Releases[i])
		}
	}
}

func TestOverlay(t *testing.T) {
	cm := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"kind": "ConfigMap",
			"metadata": map[string]any{"name": name}, "data": map[string]any{"_example": "x"}}}
	}
	dep := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"kind": "Deployment", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": name, "resources": map[string]any{"requests": map[string]any{"cpu": "300m", "memory": "60Mi"}}}}}}}}}
	}
	full := func() []*unstructured.Unstructured {
		return []*unstructured.Unstructured{cm("config-network"), cm("config-autoscaler"), cm("config-deployment"),
			dep("activator"), dep("autoscaler"), dep("controller"), dep("webhook")}
	}
	docs := full()
	if err := testOverlay(docs); err != nil {
		t.Fatal(err)
	}
	check := func(kind, name string, want string, path ...string) {
		t.Helper()
		got, _, _ := unstructured.NestedString(find(docs, kind, name).Object, path...)
		if got != want {
			t.Errorf("%s %s %s = %q, want %q", kind, name, strings.Join(path, "."), got, want)
		}
	}
	check("ConfigMap", "config-network", IngressClass, "data", "ingress-class")
	check("ConfigMap", "config-autoscaler", "6s", "data", "stable-window")
	check("ConfigMap", "config-autoscaler", "6s", "data", "scale-to-zero-grace-period")
	check("ConfigMap", "config-autoscaler", "x", "data", "_example")
	for _, d := range []string{"activator", "autoscaler", "controller", "webhook"} {
		ctrs, _, _ := unstructured.NestedSlice(find(docs, "Deployment", d).Object, "spec", "template", "spec", "containers")
		res := ctrs[0].(map[string]any)["resources"].(map[string]any)["requests"].(map[string]any)
		if res["cpu"] != systemCPU || res["memory"] != "60Mi" {
			t.Errorf("deployment %s requests %v, want cpu %s and the memory as shipped", d, res, systemCPU)
		}
	}
	// What the release must have for the overlay to mean anything.
	for i := range full() {
		docs := full()
		gone := docs[i]
		docs = append(docs[:i], docs[i+1:]...)
		if gone.GetName() == "config-deployment" {
			continue
		}
		if err := testOverlay(docs); err == nil {
			t.Errorf("without %s %s: no error", gone.GetKind(), gone.GetName())
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	cases := map[string]struct {
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		"none":              {nil, 0.5, 0},
		"one":               {ms(7), 0.99, 7 * time.Millisecond},
		"median, unsorted":  {ms(5, 1, 3), 0.5, 3 * time.Millisecond},
		"p99 of 20 is max":  {ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), 0.99, 20 * time.Millisecond},
		"p50 of 20 is 10th": {ms(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 0.5, 10 * time.Millisecond},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Percentile(tc.in, tc.q); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %s, want %s", tc.in, tc.q, got, tc.want)
			}
		})
	}
}
