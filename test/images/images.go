// Package images builds one-layer OCI images from local files (static Go
// binaries and data) and pushes them to the real node's registry, from
// which its containerd pulls them as any cluster pulls images.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// File is one file of an image layer: its content is Data, or else the
// host file Src (copied when the layer is written).
type File struct {
	Path string // absolute path in the image, e.g. "/app"
	Mode os.FileMode
	Data []byte
	Src  string
}

// Image is a one-layer OCI image built from files.
type Image struct {
	// Ref is the name pods use: Registry/<repository>:<tag>.
	Ref        string
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
}

// Registry is the host part of every image the harness builds. The real
// node's containerd maps it to the node's registry (a name with a dot, so
// the CRI plugin does not read it as docker.io/library/...).
const Registry = "istio-aux.test"

// OCI media types of the layout written here (uncompressed layer: the
// registry is local, compression would only cost CPU).
const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Push writes the image as an OCI image layout in a temporary directory
// and pushes it with `crane push` to the registry at addr, under the
// reference's repository and tag (Registry/app:dev goes to addr/app:dev),
// where the real node's containerd finds it by the name Ref.
func (img Image) Push(ctx context.Context, craneBin, addr string) error {
	if img.Ref == "" || len(img.Files) == 0 {
		return fmt.Errorf("image %q: a reference and at least one file are needed", img.Ref)
	}
	repo, ok := strings.CutPrefix(img.Ref, Registry+"/")
	if !ok {
		return fmt.Errorf("image %q: not named under %s/", img.Ref, Registry)
	}
	dir, err := os.MkdirTemp("", "istio-aux-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := img.WriteLayout(dir); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, craneBin, "push", dir, addr+"/"+repo)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("crane push %s: %w: %s", img.Ref, err, bytes.TrimSpace(out))
	}
	return nil
}

// WriteLayout writes the image as an OCI image layout into dir: the layout
// marker, the index (naming the image Ref), and the layer, config and
// manifest blobs.
func (img Image) WriteLayout(dir string) error {
	layer, err := img.layer()
	if err != nil {
		return err
	}
	layerDesc := blob(mediaLayer, layer)
	cfg, err := json.Marshal(img.config(layerDesc.Digest))
	if err != nil {
		return err
	}
	cfgDesc := blob(mediaConfig, cfg)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        cfgDesc,
		"layers":        []descriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	manDesc := blob(mediaManifest, manifest)
	manDesc.Annotations = map[string]string{
		"io.containerd.image.name":          img.Ref,
		"org.opencontainers.image.ref.name": tagOf(img.Ref),
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []descriptor{manDesc}})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"oci-layout":        []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json":        index,
		blobPath(layerDesc): layer,
		blobPath(cfgDesc):   cfg,
		blobPath(manDesc):   manifest,
	} {
		file := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// config is the OCI image configuration; the layer is its only diff.
func (img Image) config(diffID string) map[string]any {
	return map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": struct { // in the order of the JSON object's sorted keys
			Cmd        []string `json:",omitempty"`
			Entrypoint []string `json:",omitempty"`
			Env        []string `json:",omitempty"`
			User       string   `json:",omitempty"`
			WorkingDir string   `json:",omitempty"`
		}{img.Cmd, img.Entrypoint, img.Env, img.User, img.WorkingDir},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	}
}

// layer is the uncompressed tar of the files, with an entry for every
// parent directory, in a fixed order and with fixed times (the Unix epoch),
// so the same files always give the same digest.
func (img Image) layer() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	files := slices.SortedFunc(slices.Values(img.Files), func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	for _, f := range files {
		p := strings.TrimPrefix(path.Clean("/"+f.Path), "/")
		if p == "" {
			return nil, fmt.Errorf("image %s: file without a path", img.Ref)
		}
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) { // parents sort before their children
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		data := f.Data
		if f.Src != "" {
			var err error
			if data, err = os.ReadFile(f.Src); err != nil {
				return nil, fmt.Errorf("image %s: %w", img.Ref, err)
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path.Clean("/"+f.Path), "/"), Mode: int64(mode.Perm()),
			Size: int64(len(data)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func blob(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func blobPath(d descriptor) string {
	return "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
}

// tagOf is the tag of a reference ("latest" when it has none).
func tagOf(ref string) string {
	last := ref[strings.LastIndex(ref, "/")+1:]
	if i := strings.LastIndex(last, ":"); i >= 0 {
		return last[i+1:]
	}
	return "latest"
}
