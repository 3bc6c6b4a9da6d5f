package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/istio-aux/istio-aux/test/istio"
)

// resolvedAs is what ko resolve makes of the manifests of dirs: every
// ko:// image a registry's reference, by tag and digest (a stand-in for
// ko, whose references have this shape).
func resolvedAs(t *testing.T, dirs ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, d := range dirs {
		paths, err := manifests(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range paths {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s := string(raw)
			for ko, key := range images {
				s = strings.ReplaceAll(s, ko, "registry.example.com/istio-aux/"+key+":v9.9.9@sha256:"+strings.Repeat(key[:1], 64))
			}
			b.WriteString("---\n" + s + "\n")
		}
	}
	return b.Bytes()
}

// TestReleaseChart: the release's chart archive, its images the ones the
// release's manifests pin, renders at its defaults exactly the release's
// istio-aux.yaml, and standalone exactly istio-aux-standalone.yaml; it
// carries the release's version; without the standalone manifests (the
// all-in-one's image) it is refused.
func TestReleaseChart(t *testing.T) {
	files, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	config, standalone := resolvedAs(t, "config", "config/nats"), resolvedAs(t, "config/standalone")
	rel, err := Release(files, root, "v9.9.9", config, standalone)
	if err != nil {
		t.Fatal(err)
	}
	path, err := Package(rel, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "istio-aux-9.9.9.tgz" {
		t.Errorf("archive %s, want istio-aux-9.9.9.tgz", filepath.Base(path))
	}
	for name, c := range map[string]struct {
		values map[string]any
		want   []byte
	}{"defaults": {nil, config}, "standalone": {map[string]any{"standalone": true}, standalone}} {
		got, err := istio.Render(path, "istio-aux", "istio-aux", "", c.values)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) { compare(t, got, decode(t, c.want)) })
	}
	if !bytes.Contains(rel["Chart.yaml"], []byte("appVersion: v9.9.9")) {
		t.Errorf("Chart.yaml:\n%s", rel["Chart.yaml"])
	}
	if _, err := Release(files, root, "v9.9.9", config); err == nil || !strings.Contains(err.Error(), "allinone") {
		t.Errorf("without the standalone manifests: %v, want the all-in-one's image missing", err)
	}
}
