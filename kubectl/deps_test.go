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
var pluginMayRun = []string{"webhook", "webhook/proxyconfig", "bridge/watch"}

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
