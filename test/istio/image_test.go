package istio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/istio-aux/istio-aux/test/images"
)

func TestProxyImageContents(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"pilot-agent", "envoy"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("#!"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ProxyImageContents(dir, filepath.Join(dir, "envoy")); err == nil && Built() != nil {
		t.Fatal("no error though the bootstrap template is missing")
	}
	if Built() != nil {
		t.Skip("the bootstrap template comes from hack/build-istio.sh")
	}
	img, err := ProxyImageContents(dir, filepath.Join(dir, "envoy"))
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
	if img.Ref != ProxyImage || img.Entrypoint[0] != "/usr/local/bin/pilot-agent" {
		t.Errorf("ref %s, entrypoint %v", img.Ref, img.Entrypoint)
	}
}
