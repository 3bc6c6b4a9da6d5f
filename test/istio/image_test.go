package istio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
)

func TestProxyImageContents(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("ISTIO_AUX_CACHE", dir) // where a release's build is looked for
	r := R126
	envoy := filepath.Join(dir, "envoy")
	if err := os.MkdirAll(r.BinDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(r.BinDir(), "pilot-agent"), envoy} {
		if err := os.WriteFile(f, []byte("#!"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ProxyImageContents(r, envoy); err == nil {
		t.Fatal("no error though the bootstrap template is missing")
	}
	if err := os.WriteFile(r.BootstrapTemplate(), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := ProxyImageContents(r, envoy)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]images.File{}
	for _, f := range img.Files {
		files[f.Path] = f
	}
	for path, mode := range map[string]os.FileMode{
		"/usr/local/bin/pilot-agent":                     0o755,
		"/usr/local/bin/envoy":                           0o755,
		"/var/lib/istio/envoy/envoy_bootstrap_tmpl.json": 0o644,
		"/etc/passwd":                                    0o644,
	} {
		if f, ok := files[path]; !ok || f.Mode != mode {
			t.Errorf("%s: %+v, want mode %o", path, f, mode)
		}
	}
	for _, forbidden := range []string{"/bin/sh", "/usr/bin/curl", "/" + WorkloadCertsDir} {
		for path := range files {
			if strings.HasPrefix(path, forbidden) {
				t.Errorf("%s in the image", path)
			}
		}
	}
	if !strings.Contains(string(files["/etc/passwd"].Data), ":1337:1337:") {
		t.Error("/etc/passwd has no uid 1337")
	}
	if img.Ref != r.ProxyImage() || img.Ref == ProxyImage || img.Entrypoint[0] != "/usr/local/bin/pilot-agent" {
		t.Errorf("ref %s, entrypoint %v", img.Ref, img.Entrypoint)
	}
}

// TestReleasesMatchTheirModuleFiles keeps each Istio release the harness
// runs equal to what its module file in hack/tools/istio requires, which is
// what hack/build-istio.sh builds and caches it under.
func TestReleasesMatchTheirModuleFiles(t *testing.T) {
	for _, r := range Releases {
		got, err := cluster.ToolsVersionIn("istio", r.ModFile(), "istio.io/istio")
		if err != nil || got != r.version() {
			t.Errorf("Istio %s: hack/tools/istio/%s requires %s (%v), the harness runs %s", r, r.ModFile(), got, err, r.version())
		}
	}
}
