// Command release splits the OCI image layout `ko resolve --oci-layout-path`
// wrote for a release into one layout per image, so that each can be
// pushed on its own (`crane push images/<name> REPO/<name>:VERSION`) into a
// registry a cluster without internet pulls from. The per-image layouts
// share one blobs directory; each holds the one manifest the release's
// manifests pin by digest, so the digest in the registry is the pinned one.
//
//	go run ./hack/release -layout DIR -out images/ -version vX.Y.Z release.yaml...
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
)

// descriptor is an OCI content descriptor, as index.json lists them.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    json.RawMessage   `json:"platform,omitempty"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Manifests     []descriptor `json:"manifests"`
}

// refAnnotation names an image in a layout (the OCI image spec's
// org.opencontainers.image.ref.name).
const refAnnotation = "org.opencontainers.image.ref.name"

func main() {
	layoutDir := flag.String("layout", "", "the OCI layout ko wrote")
	out := flag.String("out", "", "where to write one layout per image")
	version := flag.String("version", "", "the release's version, the images' tag")
	flag.Parse()
	if *layoutDir == "" || *out == "" || *version == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: release -layout DIR -out DIR -version vX.Y.Z release.yaml...")
		os.Exit(2)
	}
	if err := split(*layoutDir, *out, *version, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func split(layoutDir, out, version string, manifests []string) error {
	images, err := pinned(version, manifests)
	if err != nil {
		return err
	}
	var all index
	b, err := os.ReadFile(filepath.Join(layoutDir, "index.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &all); err != nil {
		return fmt.Errorf("%s/index.json: %w", layoutDir, err)
	}
	byDigest := map[string]descriptor{}
	for _, d := range all.Manifests {
		byDigest[d.Digest] = d
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(layoutDir, "blobs"), filepath.Join(out, "blobs")); err != nil {
		return err
	}
	names := make([]string, 0, len(images))
	for name := range images {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		d, ok := byDigest[images[name]]
		if !ok {
			return fmt.Errorf("image %s@%s is pinned but not in %s", name, images[name], layoutDir)
		}
		d.Annotations = map[string]string{refAnnotation: version}
		dir := filepath.Join(out, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		idx, _ := json.MarshalIndent(index{SchemaVersion: 2, MediaType: "application/vnd.oci.image.index.v1+json", Manifests: []descriptor{d}}, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
			return err
		}
		if err := os.Symlink(filepath.Join("..", "blobs"), filepath.Join(dir, "blobs")); err != nil {
			return err
		}
		fmt.Printf("%s\t%s\n", name, d.Digest)
	}
	return nil
}

// imageRef is an image as ko resolve --tags VERSION pins it:
// REPO/NAME:VERSION@sha256:DIGEST.
var imageRef = regexp.MustCompile(`image:\s*"?([^\s"@:]+(?::[0-9]+)?/[^\s"@:]+):([^\s"@]+)@(sha256:[0-9a-f]{64})`)

// pinned reads the images the release's manifests pin: name -> digest.
func pinned(version string, manifests []string) (map[string]string, error) {
	images := map[string]string{}
	for _, m := range manifests {
		b, err := os.ReadFile(m)
		if err != nil {
			return nil, err
		}
		for _, g := range imageRef.FindAllStringSubmatch(string(b), -1) {
			if g[2] != version {
				return nil, fmt.Errorf("%s: %s is tagged %s, not %s", m, g[1], g[2], version)
			}
			name := path.Base(g[1])
			if d, ok := images[name]; ok && d != g[3] {
				return nil, fmt.Errorf("%s: two images named %s (%s, %s)", m, name, d, g[3])
			}
			images[name] = g[3]
		}
	}
	if len(images) == 0 {
		return nil, errors.New("the manifests pin no image")
	}
	return images, nil
}
