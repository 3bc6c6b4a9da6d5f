package tools

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestReleaseKrewManifest checks a release's krew manifest (RELEASE_DIR,
// written by hack/release.sh; hack/ko-resolve.sh runs this after its
// release) with krew's own validate-krew-manifest: the manifest's structure,
// every platform selector one krew supports and no two overlapping, then
// `kubectl krew install` of every platform from the release's archives
// (served here on 127.0.0.1 in place of the release's address), each
// archive's SHA-256 and its LICENSE checked. The plugin krew installed for
// this machine then answers `version --client`, and a manifest whose
// checksum is wrong is refused.
func TestReleaseKrewManifest(t *testing.T) {
	dir, kubectl := os.Getenv("RELEASE_DIR"), os.Getenv("KUBECTL")
	if dir == "" || kubectl == "" {
		t.Skip("RELEASE_DIR (a release hack/release.sh wrote) and KUBECTL (a kubectl binary) are unset: hack/ko-resolve.sh sets them")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "sigs.k8s.io/krew/cmd/krew", "sigs.k8s.io/krew/cmd/validate-krew-manifest")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building krew: %v\n%s", err, out)
	}
	// kubectl finds krew as its plugin kubectl-krew on PATH.
	if err := os.Rename(filepath.Join(bin, "krew"), filepath.Join(bin, "kubectl-krew")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(kubectl, filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()

	raw, err := os.ReadFile(filepath.Join(dir, "krew", "istio-aux.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	uri := regexp.MustCompile(`(?m)^(\s*uri:\s*)\S*/(kubectl-istio_aux_[a-z]+_[a-z0-9]+\.tar\.gz)$`)
	if n := len(uri.FindAll(raw, -1)); n < 6 {
		t.Fatalf("the manifest lists %d archives, want linux, darwin and windows on amd64 and arm64:\n%s", n, raw)
	}
	local := uri.ReplaceAll(raw, []byte("${1}"+srv.URL+"/${2}"))
	path := writeManifest(t, local)
	// kubectl and kubectl-krew first on PATH.
	withBin := "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")
	validate := func(manifest string) ([]byte, error) {
		cmd := exec.Command(filepath.Join(bin, "validate-krew-manifest"), "-manifest", manifest)
		cmd.Env = append(os.Environ(), withBin)
		return cmd.CombinedOutput()
	}

	out, err := validate(path)
	t.Logf("validate-krew-manifest:\n%s", out)
	if err != nil {
		t.Fatalf("krew's validation refused the release's manifest: %v", err)
	}

	// Installed for this machine, the plugin runs.
	root := t.TempDir()
	install := exec.Command(filepath.Join(bin, "kubectl"), "krew", "install", "--manifest", path)
	install.Env = append(os.Environ(), "KREW_ROOT="+root, "KREW_NO_UPGRADE_CHECK=1", withBin)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("kubectl krew install: %v\n%s", err, out)
	}
	if runtime.GOOS == "linux" {
		version := exec.Command(filepath.Join(root, "bin", "kubectl-istio_aux"), "version", "--client")
		out, err := version.CombinedOutput()
		if err != nil {
			t.Fatalf("the installed plugin: %v\n%s", err, out)
		}
		// The plugin knows the release it came with (make release stamps it).
		m := regexp.MustCompile(`(?m)^\s*version:\s*(\S+)\s*$`).FindSubmatch(raw)
		if m == nil {
			t.Fatalf("the manifest has no spec.version:\n%s", raw)
		}
		if !bytes.Contains(out, m[1]) {
			t.Errorf("version --client printed %q, want the release's %s", out, m[1])
		}
		t.Logf("installed by krew: %s", bytes.TrimSpace(out))
	}

	// A checksum that is not the archive's: krew refuses to install it.
	sum := regexp.MustCompile(`(?m)^(\s*sha256:\s*)[0-9a-f]{64}$`)
	wrong := sum.ReplaceAll(local, []byte("${1}"+strings.Repeat("0", 64)))
	if out, err := validate(writeManifest(t, wrong)); err == nil {
		t.Errorf("a manifest with wrong checksums passed krew's validation:\n%s", out)
	}
}

// writeManifest writes raw as istio-aux.yaml in a directory of its own
// (krew wants the file named after the plugin) and returns its path.
func writeManifest(t *testing.T, raw []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "istio-aux.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
