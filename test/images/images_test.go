package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The layout is a valid OCI layout (crane pushes it): every blob is stored
// under its digest, the index names the image, the config carries the
// runtime settings, and the layer has the files with parent directories
// first.
func TestWriteLayoutIsAnOCILayout(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(src, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	img := Image{
		Ref: "istio-aux.test/app:dev",
		Files: []File{
			{Path: "/usr/local/bin/app", Mode: 0o755, Src: src},
			{Path: "/etc/app.conf", Data: []byte("x=1\n")},
		},
		Entrypoint: []string{"/usr/local/bin/app"}, Cmd: []string{"run"}, Env: []string{"A=b"}, User: "65532",
	}
	layout := t.TempDir()
	if err := img.WriteLayout(layout); err != nil {
		t.Fatal(err)
	}
	files := readDir(t, layout)
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	mustJSON(t, files["index.json"], &index)
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != img.Ref ||
		index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "dev" {
		t.Fatalf("index = %+v", index)
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	mustJSON(t, blobOf(t, files, index.Manifests[0]), &manifest)
	var cfg struct {
		Config map[string]any `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	mustJSON(t, blobOf(t, files, manifest.Config), &cfg)
	if cfg.Config["User"] != "65532" || len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Errorf("config = %+v", cfg)
	}
	layer := blobOf(t, files, manifest.Layers[0])
	var names []string
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "usr/local/bin/app" && h.Mode != 0o755 {
			t.Errorf("app mode = %o", h.Mode)
		}
	}
	want := "etc/ usr/ usr/local/ usr/local/bin/ etc/app.conf usr/local/bin/app"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("layer entries = %s, want %s", got, want)
	}
	// The same files give the same image.
	again := t.TempDir()
	if err := img.WriteLayout(again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files["index.json"], readDir(t, again)["index.json"]) {
		t.Error("two layouts of one image differ")
	}
}

func TestTagOf(t *testing.T) {
	for ref, want := range map[string]string{
		"istio-aux.test/app:dev": "dev", "localhost:5000/app": "latest", "localhost:5000/app:v1": "v1",
	} {
		if got := tagOf(ref); got != want {
			t.Errorf("tagOf(%q) = %q, want %q", ref, got, want)
		}
	}
}

// readDir reads every file below dir, by its slash-separated path.
func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := fs.WalkDir(os.DirFS(dir), ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out[path], err = os.ReadFile(filepath.Join(dir, path))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// blobOf returns a blob after checking that its digest and size are right.
func blobOf(t *testing.T, files map[string][]byte, d descriptor) []byte {
	t.Helper()
	b, ok := files[blobPath(d)]
	if !ok {
		t.Fatalf("blob %s missing", d.Digest)
	}
	sum := sha256.Sum256(b)
	if "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: wrong digest or size", d.Digest)
	}
	return b
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}
