//go:build e2e

package config

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/modroot"
	"github.com/istio-aux/istio-aux/test/poll"
)

// Knative releases whose CRDs the manifests are checked against: the
// serving and eventing tags of Knative 1.23, the release of the
// knative.dev/pkg pinned in go.mod (moduleDir checks they require it).
const (
	servingModule  = "knative.dev/serving@v0.50.0"
	eventingModule = "knative.dev/eventing@v0.50.0"
)

// placeholder is what ko:// references become for the dry-run: a valid,
// never-pulled image reference (no image is built or needed).
func placeholder(path string) string { return "registry.invalid/ko/" + path + ":dry-run" }

// TestDryRun applies every manifest of dirs with server-side apply, dry-run
// and strict field validation against a real kube-apiserver holding the real
// Knative Serving and Eventing CRDs, so that a misspelt field, a wrong type
// or an invalid value fails here rather than on a user's cluster.
func TestDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	serving, eventing := moduleDir(t, servingModule), moduleDir(t, eventingModule)
	_, a := start(ctx, t, cluster.Options{})

	// The CRDs for real: the dry-run of our objects is validated against
	// their OpenAPI schemas.
	crds := append(loadDocs(t, filepath.Join(serving, "config/core/300-resources"), nil),
		loadDocs(t, filepath.Join(eventing, "config/core/resources"), nil)...)
	for _, d := range crds {
		if d.obj.GetKind() == "CustomResourceDefinition" {
			a.create(ctx, t, d)
		}
	}
	a.waitForKind(ctx, t, "serving.knative.dev/v1", "Service")
	a.waitForKind(ctx, t, "sources.knative.dev/v1", "ApiServerSource")

	// Namespaced objects are only admitted into an existing namespace (the
	// NamespaceLifecycle admission plugin), so the namespace is created for
	// real; everything else, the namespace included, is a dry-run.
	ns := loadDocs(t, "config", nil)[0]
	if ns.obj.GetKind() != "Namespace" {
		t.Fatalf("the first manifest is %s, want the Namespace", ns)
	}
	a.create(ctx, t, ns)
	for _, dir := range dirs {
		for _, d := range loadDocs(t, dir, placeholder) {
			t.Run(d.String(), func(t *testing.T) {
				if err := a.apply(ctx, d, true); err != nil {
					t.Errorf("server-side dry-run: %v", err)
				}
			})
		}
	}

	// The check itself must be able to fail.
	t.Run("rejects a misspelt Knative Service field", func(t *testing.T) {
		d := find(t, loadDocs(t, "config", placeholder), "Service", "proxy-quit")
		if err := unstructured.SetNestedField(d.obj.Object, int64(5), "spec", "template", "spec", "containerConcurency"); err != nil {
			t.Fatal(err)
		}
		if err := a.apply(ctx, d, true); err == nil || !strings.Contains(err.Error(), "containerConcurency") {
			t.Errorf("dry-run of a misspelt field: err = %v, want it named", err)
		}
	})
	t.Run("rejects an invalid failurePolicy", func(t *testing.T) {
		d := find(t, loadDocs(t, "config", placeholder), "MutatingWebhookConfiguration", "istio-aux-webhook")
		hooks, _, _ := unstructured.NestedSlice(d.obj.Object, "webhooks")
		hooks[0].(map[string]any)["failurePolicy"] = "Sometimes"
		if err := unstructured.SetNestedSlice(d.obj.Object, hooks, "webhooks"); err != nil {
			t.Fatal(err)
		}
		if err := a.apply(ctx, d, true); !apierrors.IsInvalid(err) {
			t.Errorf("dry-run of failurePolicy Sometimes: err = %v, want Invalid", err)
		}
	})
}

// start starts a control plane (opts, logging to a file kept on failure),
// stopped when the test ends.
func start(ctx context.Context, t *testing.T, opts cluster.Options) (*cluster.Cluster, *applier) {
	t.Helper()
	opts.Log = testLog(t)
	if opts.Version == "" {
		opts.Version = apiVersion
	}
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c, &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}
}

// applier server-side applies documents through the dynamic client.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// apply server-side applies d (force, strict field validation), as a
// dry-run or for real.
func (a *applier) apply(ctx context.Context, d doc, dryRun bool) error {
	_, err := a.applied(ctx, d, dryRun)
	return err
}

// applied is apply's result: the object as the API server has it (or would
// have it, as a dry-run) after the apply.
func (a *applier) applied(ctx context.Context, d doc, dryRun bool) (*unstructured.Unstructured, error) {
	ri, err := a.resource(d)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(d.obj.Object)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: "istio-aux-test", Force: ptr.To(true), FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return ri.Patch(ctx, d.obj.GetName(), types.ApplyPatchType, body, opts)
}

// live is d's object as the API server has it now.
func (a *applier) live(ctx context.Context, d doc) (*unstructured.Unstructured, error) {
	ri, err := a.resource(d)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, d.obj.GetName(), metav1.GetOptions{})
}

// resource is the dynamic client of d's kind, in d's namespace if it has one.
func (a *applier) resource(d doc) (dynamic.ResourceInterface, error) {
	gvk := d.obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource).Namespace(d.obj.GetNamespace()), nil
	}
	return a.dyn.Resource(m.Resource), nil
}

// create applies d for real, or fails the test.
func (a *applier) create(ctx context.Context, t *testing.T, d doc) {
	t.Helper()
	if err := a.apply(ctx, d, false); err != nil {
		t.Fatalf("applying %s: %v", d, err)
	}
}

// waitForKind polls discovery until the API server serves the kind: a CRD
// serves only once it is Established.
func (a *applier) waitForKind(ctx context.Context, t *testing.T, apiVersion, kind string) {
	t.Helper()
	gvk := schema.FromAPIVersionAndKind(apiVersion, kind)
	err := poll.Until(ctx, time.Minute, func(context.Context) (bool, error) {
		a.mapper.Reset()
		_, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s never served: %v", gvk, err)
	}
}

// moduleDir downloads (from the module cache or the Go module proxy) a
// Knative module and checks it was released with our knative.dev/pkg.
func moduleDir(t *testing.T, modVersion string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", modVersion)
	cmd.Dir = t.TempDir() // outside our module: nothing is added to go.mod/go.sum
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v\n%s", modVersion, err, out)
	}
	var info struct{ Dir, GoMod, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Error != "" {
		t.Fatalf("go mod download %s: %v %s", modVersion, err, info.Error)
	}
	ours := requiredVersion(t, filepath.Join(modroot.Dir(), "go.mod"), "knative.dev/pkg")
	if theirs := requiredVersion(t, info.GoMod, "knative.dev/pkg"); theirs != ours {
		t.Fatalf("%s requires knative.dev/pkg %s, we build with %s: pick the matching release", modVersion, theirs, ours)
	}
	return info.Dir
}

func requiredVersion(t *testing.T, goMod, module string) string {
	t.Helper()
	b, err := os.ReadFile(goMod)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	t.Fatalf("%s does not require %s", goMod, module)
	return ""
}

// testLog sends the control plane's output to a file kept on failure.
func testLog(t *testing.T) *os.File {
	t.Helper()
	f, err := os.CreateTemp("", "istio-aux-dryrun-*.log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if t.Failed() {
			t.Logf("control plane log: %s", f.Name())
			return
		}
		os.Remove(f.Name())
	})
	return f
}
