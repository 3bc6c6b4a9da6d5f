package docs

import (
	"bytes"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/internal/env"
	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

var update = flag.Bool("update", false, "write environment.md from internal/env")

// TestEnvironmentReference: environment.md is what internal/env generates.
func TestEnvironmentReference(t *testing.T) {
	want := EnvironmentReference()
	if *update {
		if err := os.WriteFile("environment.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("environment.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Error("docs/environment.md is not what internal/env generates: go test ./docs/ -run TestEnvironmentReference -update")
	}
}

// readerOf is the program each image of config/ runs.
var readerOf = map[string][]env.Reader{
	"ko://github.com/istio-aux/istio-aux/bridge/cmd/bridge":                 {env.Bridge},
	"ko://github.com/istio-aux/istio-aux/bridge/cmd/natstoken":              {env.NATSTokenCmd},
	"ko://github.com/istio-aux/istio-aux/cmd/allinone":                      {env.AllInOne},
	"ko://github.com/istio-aux/istio-aux/functions/proxyquit/cmd/proxyquit": {env.ProxyQuit},
	"ko://github.com/istio-aux/istio-aux/webhook/cmd/webhook":               {env.Webhook, env.Knative},
	"ko://github.com/nats-io/nats-server/v2":                                {env.NATSServer},
}

// TestConfigSetsOnlyRegisteredVariables: every variable a container of
// config/ (every install shape) is given is in internal/env, read by the
// program that container runs; and every variable only others read (knative,
// nats-server) is set by config/, or nothing would read it.
func TestConfigSetsOnlyRegisteredVariables(t *testing.T) {
	known := map[string]env.Var{}
	for _, v := range env.All() {
		known[v.Name] = v
	}
	set := map[string]bool{}
	containers := 0
	err := filepath.WalkDir("../config", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, doc := range bytes.Split(raw, []byte("\n---")) {
			var obj any
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			cluster.EachContainer(obj, func(c map[string]any) {
				containers++
				image, _ := c["image"].(string)
				readers, ok := readerOf[image]
				if !ok {
					t.Errorf("%s: container %v runs %q, which readerOf does not know", path, c["name"], image)
					return
				}
				envs, _ := c["env"].([]any)
				for _, e := range envs {
					name, _ := e.(map[string]any)["name"].(string)
					set[name] = true
					v, ok := known[name]
					switch {
					case !ok:
						t.Errorf("%s: container %v sets %s, which internal/env does not list", path, c["name"], name)
					case !readByAny(v, readers):
						t.Errorf("%s: container %v (%v) sets %s, which internal/env says only %v read", path, c["name"], readers, name, v.Readers)
					}
				}
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if containers < 10 || len(set) < 15 {
		t.Fatalf("found %d containers setting %d variables: the test lost its grip", containers, len(set))
	}
	for _, v := range env.All() {
		if !readByAny(v, env.Ours) && !set[v.Name] {
			t.Errorf("%s is read only by %v, and config/ does not set it: nothing reads it", v.Name, v.Readers)
		}
	}
}

func readByAny(v env.Var, readers []env.Reader) bool {
	for _, r := range readers {
		if v.ReadBy(r) {
			return true
		}
	}
	return false
}

// TestEveryRegisteredVariableIsRead: each variable internal/env says one
// of istio-aux's programs reads is read through the registry somewhere
// outside it (env.<Name> in a non-test file), so that none stays listed
// after its reader is gone.
func TestEveryRegisteredVariableIsRead(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../internal/env/env.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	idents := map[string]string{} // Go name -> variable
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != 1 {
			return true
		}
		call, ok := vs.Values[0].(*ast.CallExpr)
		if !ok || len(call.Args) != 1 {
			return true
		}
		if fn, ok := call.Fun.(*ast.Ident); !ok || fn.Name != "register" {
			return true
		}
		for _, el := range call.Args[0].(*ast.CompositeLit).Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok && kv.Key.(*ast.Ident).Name == "Name" {
				name, _ := strconv.Unquote(kv.Value.(*ast.BasicLit).Value)
				idents[vs.Names[0].Name] = name
			}
		}
		return true
	})
	if len(idents) != len(env.All()) {
		t.Fatalf("found %d registered variables in env.go, env.All has %d", len(idents), len(env.All()))
	}
	var src strings.Builder
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == "_output" || d.Name() == "hack" || strings.HasPrefix(d.Name(), ".") && path != ".."):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Dir(path) == filepath.Join("..", "internal", "env"):
			return nil
		}
		b, err := os.ReadFile(path)
		src.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]env.Var{}
	for _, v := range env.All() {
		byName[v.Name] = v
	}
	for ident, name := range idents {
		if !readByAny(byName[name], env.Ours) {
			continue
		}
		if !regexp.MustCompile(`\benv\.` + ident + `\b`).MatchString(src.String()) {
			t.Errorf("%s (env.%s) is listed as read by %v, and no code reads it", name, ident, byName[name].Readers)
		}
	}
}

// TestEnvironmentDefaults: the defaults the registry documents are the
// ones the code falls back on where it keeps a constant of its own.
func TestEnvironmentDefaults(t *testing.T) {
	for _, c := range []struct {
		v    *env.Var
		code string
	}{
		{env.MetricsAddr, ":" + names.MetricsPort},
		{env.NATSStream, transport.DefaultName},
		{env.Lease, names.WatcherLease},
		{env.WebhookSecretName, names.WebhookSecret},
		{env.WebhookPort, strconv.Itoa(admission.Port)},
		{env.QuitCommand, settings.DefaultQuitCommand},
		{env.Resync, settings.DefaultResync.String()},
		{env.ExecTimeout, proxyquit.DefaultExecTimeout.String()},
		{env.AuthAudiences, proxyquit.DefaultAudience},
		{env.AuthCallers, strings.Join(proxyquit.DefaultCallers, ",")},
	} {
		if d, err := time.ParseDuration(c.v.Default); err == nil {
			if cd, err := time.ParseDuration(c.code); err == nil && d == cd {
				continue
			}
		}
		if c.v.Default != c.code {
			t.Errorf("%s: internal/env's default %q, the code's %q", c.v.Name, c.v.Default, c.code)
		}
	}
}
