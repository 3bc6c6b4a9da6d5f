package kubectl_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/istio-aux/istio-aux/test/modroot"
)

// module is the import path every package of istio-aux starts with.
const module = modroot.Module + "/"

// TestLayers holds the folders' layers, which run one way: pkg/ (names and
// pure rules) under internal/ (the components' plumbing) under the
// components (bridge/, functions/, webhook/) under the plugin (kubectl/).
// So nothing below the plugin imports it, internal/ imports no component,
// and pkg/ neither. Their tests are held too: a component's test that
// needed the plugin would say the layers are wrong.
func TestLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	rules := []struct {
		patterns []string
		forbid   []string // top folders none of their packages may import
	}{
		{[]string{"./pkg/..."}, append([]string{"kubectl", "internal"}, components...)},
		{[]string{"./internal/..."}, append([]string{"kubectl"}, components...)},
		{[]string{"./bridge/...", "./functions/...", "./webhook/...", "./cmd/allinone"}, []string{"kubectl"}},
	}
	for _, r := range rules {
		// Every package they depend on, theirs or not: one that is not
		// forbidden itself must not lead into a forbidden folder.
		for _, p := range list(t, append([]string{"-deps", "-test"}, r.patterns...)...) {
			if slices.Contains(r.forbid, topFolder(p.path)) {
				continue // reached only through the import reported below
			}
			for _, imp := range p.imports {
				if top := topFolder(imp); slices.Contains(r.forbid, top) {
					t.Errorf("%s imports %s: %v may not depend on %s/", p.path, imp, r.patterns, top)
				}
			}
		}
	}
}

// components are the top folders of istio-aux's deployed parts.
var components = []string{"bridge", "functions", "webhook"}

// pluginMayRun are the components' packages the plugin may import, as its
// package comment (doc.go) lists them: it runs their logic to tell what
// they do. Every other name it shares with them is in pkg/.
var pluginMayRun = []string{"webhook/admission", "webhook/proxyconfig", "bridge/watch"}

// TestPluginImportsComponentsOnlyToRunThem: a new import of a component by
// the plugin is either a name that belongs in pkg/names or pkg/keys, or
// logic to add to doc.go's list and to pluginMayRun.
func TestPluginImportsComponentsOnlyToRunThem(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, p := range list(t, "./kubectl/...", "./cmd/kubectl-istio_aux") {
		for _, imp := range p.imports {
			rel, ok := strings.CutPrefix(imp, module)
			if !ok || !slices.Contains(components, topFolder(imp)) {
				continue
			}
			if !slices.Contains(pluginMayRun, rel) {
				t.Errorf("%s imports %s: take its names from pkg/, or list the logic it runs in kubectl/doc.go and pluginMayRun", p.path, imp)
			}
		}
	}
}

// serving are the import paths of what runs a component as a server: a
// controller and its informers, knative's injection, leader election, an
// admission server. The plugin runs the components' logic, never their
// serving (it would link knative.dev/pkg's controller, 200 packages, for
// nothing), and the webhook's pure package has none of it either.
var serving = []string{
	"knative.dev/pkg/controller", "knative.dev/pkg/injection", "knative.dev/pkg/client/injection",
	"knative.dev/pkg/leaderelection", "knative.dev/pkg/reconciler", "knative.dev/pkg/webhook",
	"k8s.io/client-go/informers", "k8s.io/client-go/tools/leaderelection",
	module + "webhook",
}

// TestPluginLinksNoServing: the plugin's binary, and webhook/admission
// (the webhook's logic it runs), link none of serving's packages. (The
// certificate helpers of knative.dev/pkg/webhook/certificates/resources
// are pure: check reads the webhook's certificate with them.)
func TestPluginLinksNoServing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	allowed := []string{"knative.dev/pkg/webhook/certificates/resources", module + "webhook/admission", module + "webhook/proxyconfig"}
	for _, root := range []string{"./cmd/kubectl-istio_aux", "./webhook/admission"} {
		n := 0
		for _, p := range listAll(t, "-deps", root) {
			n++
			for _, s := range serving {
				if (p == s || strings.HasPrefix(p, s+"/")) && !slices.ContainsFunc(allowed, func(a string) bool { return p == a || strings.HasPrefix(p, a+"/") }) {
					t.Errorf("%s links %s", root, p)
				}
			}
		}
		t.Logf("%s links %d packages", root, n)
	}
}

// listAll is every package go list names for args, istio-aux's or not.
func listAll(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = modroot.Dir()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// pkg is a package go list found, with its direct imports (its tests' too
// for the test variants -test lists).
type pkg struct {
	path    string
	imports []string
}

// list runs go list with args at the module's root.
func list(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}"}, args...)...)
	cmd.Dir = modroot.Dir()
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list %v: %v\n%s", args, err, exit.Stderr)
		}
		t.Fatalf("go list %v: %v", args, err)
	}
	var pkgs []pkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, imports, _ := strings.Cut(line, "\t")
		if strings.HasPrefix(path, module) {
			pkgs = append(pkgs, pkg{path: path, imports: strings.Fields(imports)})
		}
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list %v found no package of istio-aux", args)
	}
	return pkgs
}

// topFolder is the top folder of one of istio-aux's packages, "" for
// another module's.
func topFolder(importPath string) string {
	rel, ok := strings.CutPrefix(importPath, module)
	if !ok {
		return ""
	}
	top, _, _ := strings.Cut(rel, "/")
	return top
}
