package kube_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFunctionLeavesOutTheClientset holds the reason this package exists:
// the function must not link client-go's clientset, whose init registers
// every API group (6 MiB more RSS per process, measured on 2026-11-26; 12 MB
// more binary). The bridge links it since it stands for a Lease: client-go's
// leader election is written on the clientset, and a hand-written election
// is not worth 6 MiB (docs/design.md, "Many nodes"). It still watches and
// reads through this package.
func TestFunctionLeavesOutTheClientset(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, cmd := range []string{"../../functions/proxyquit/cmd/proxyquit"} {
		out, err := exec.Command("go", "list", "-deps", cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", cmd, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			switch {
			case dep == "k8s.io/client-go/kubernetes", dep == "k8s.io/client-go/kubernetes/scheme",
				dep == "k8s.io/client-go/informers", strings.HasPrefix(dep, "k8s.io/api/apps/"):
				t.Errorf("%s links %s", cmd, dep)
			}
		}
	}
}

// TestBridgeLeavesOutTheFunction: the deployed bridge delivers over HTTP
// and never links the proxy-quit function or its exec transports
// (remotecommand, SPDY, WebSocket); only cmd/allinone does.
func TestBridgeLeavesOutTheFunction(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "../../bridge/cmd/bridge").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "k8s.io/client-go/tools/remotecommand", "k8s.io/client-go/transport/spdy",
			"github.com/istio-aux/istio-aux/functions/proxyquit":
			t.Errorf("bridge/cmd/bridge links %s", dep)
		}
	}
}

// TestPkgReadsNoEnvironment: pkg/ is the pure domain every component and
// the plugin share; where a setting comes from (the environment, a
// ConfigMap) is each component's business (internal/settings).
func TestPkgReadsNoEnvironment(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir("../../pkg", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			// Nor names a variable for someone else to read.
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING &&
				(strings.HasPrefix(lit.Value, `"ISTIO_AUX_`) || lit.Value == `"SYSTEM_NAMESPACE"`) {
				t.Errorf("%s: %s: pkg/ names no environment variable", fset.Position(lit.Pos()), lit.Value)
			}
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && (pkg.Name == "os" || pkg.Name == "syscall") {
				switch sel.Sel.Name {
				case "Getenv", "LookupEnv", "Environ", "ExpandEnv":
					t.Errorf("%s: %s.%s: pkg/ reads no environment", fset.Position(sel.Pos()), pkg.Name, sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
