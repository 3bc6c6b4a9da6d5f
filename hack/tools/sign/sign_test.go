package main

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// release is a release in miniature: an image index pushed to a registry
// (go-containerregistry's, in memory), ko's SBOM for it, a checksums file,
// and a key pair; signed as hack/release.sh signs.
type release struct {
	dir, pinned, commit string
	tag                 name.Tag
	signer              *signer
	verifier            *verifier
}

func newRelease(t *testing.T) *release {
	t.Helper()
	ctx := context.Background()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	r := &release{dir: t.TempDir(), commit: "0123456789abcdef0123456789abcdef01234567"}
	var err error
	if r.tag, err = name.NewTag(host + "/istio-aux/webhook:v1.2.3"); err != nil {
		t.Fatal(err)
	}
	idx, err := random.Index(512, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r.tag, idx, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	digest, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	r.pinned = r.tag.String() + "@" + digest.String()
	sbom := `{"spdxVersion":"SPDX-2.3","SPDXID":"SPDXRef-DOCUMENT","name":"webhook","packages":[]}`
	if err := os.WriteFile(filepath.Join(r.dir, "webhook-index.spdx.json"), []byte(sbom), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "checksums.txt"), []byte("abc  istio-aux.yaml\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Setenv("COSIGN_PASSWORD", "")
	if err := keygen(r.dir, password()); err != nil {
		t.Fatal(err)
	}
	if r.signer, err = loadSigner(filepath.Join(r.dir, "cosign.key"), password()); err != nil {
		t.Fatal(err)
	}
	if r.verifier, err = loadVerifier(filepath.Join(r.dir, "cosign.pub")); err != nil {
		t.Fatal(err)
	}
	in := provenanceInputs{commit: r.commit, command: "make release VERSION=v1.2.3"}
	if err := r.signer.images(ctx, []string{r.pinned}, r.dir, in); err != nil {
		t.Fatal(err)
	}
	if err := r.signer.blobs([]string{filepath.Join(r.dir, "checksums.txt")}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *release) verify(ctx context.Context) error {
	return r.verifier.all(ctx, []string{r.pinned}, []string{filepath.Join(r.dir, "checksums.txt")}, r.commit)
}

// TestSignedReleaseVerifies: what the signer writes (cosign's signature
// and attestation tags, the blob's .sig), cosign's own verification code
// accepts, with the release's public key and no transparency log.
func TestSignedReleaseVerifies(t *testing.T) {
	r := newRelease(t)
	if err := r.verify(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyRefusesTampered: every way a release can be altered after it
// was signed fails verification, each for its own reason.
func TestVerifyRefusesTampered(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, r *release)
	}{{
		name: "the tag moved to other bytes",
		tamper: func(t *testing.T, r *release) {
			other, err := random.Index(512, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.WriteIndex(r.tag, other, remote.WithContext(ctx)); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name: "another key",
		tamper: func(t *testing.T, r *release) {
			dir := t.TempDir()
			if err := keygen(dir, nil); err != nil {
				t.Fatal(err)
			}
			v, err := loadVerifier(filepath.Join(dir, "cosign.pub"))
			if err != nil {
				t.Fatal(err)
			}
			r.verifier = v
		},
	}, {
		name: "the checksums edited",
		tamper: func(t *testing.T, r *release) {
			if err := os.WriteFile(filepath.Join(r.dir, "checksums.txt"), []byte("abd  istio-aux.yaml\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name: "a provenance of another commit expected",
		tamper: func(t *testing.T, r *release) {
			r.commit = strings.Repeat("f", 40)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRelease(t)
			tc.tamper(t, r)
			err := r.verify(ctx)
			if err == nil {
				t.Fatal("verified")
			}
			if !errors.Is(err, errVerify) {
				t.Errorf("failed, but not as unverified: %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestVerifyChartWithoutSBOM: an artifact signed with its provenance and
// no SBOM (the Helm chart, pushed as an OCI artifact) verifies when no SBOM
// is asked for, and fails when one is.
func TestVerifyChartWithoutSBOM(t *testing.T) {
	ctx := context.Background()
	r := newRelease(t)
	chart, err := name.NewTag(r.tag.Context().RegistryStr() + "/istio-aux/charts/istio-aux:1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(chart, img, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref := chart.String() + "@" + digest.String()
	if err := r.signer.images(ctx, []string{ref}, "", provenanceInputs{commit: r.commit, command: "make release"}); err != nil {
		t.Fatal(err)
	}
	r.verifier.sbom = false
	if err := r.verifier.all(ctx, []string{ref}, nil, r.commit); err != nil {
		t.Fatalf("the chart without an SBOM: %v", err)
	}
	r.verifier.sbom = true
	if err := r.verifier.all(ctx, []string{ref}, nil, r.commit); !errors.Is(err, errVerify) {
		t.Fatalf("an SBOM required of the chart: %v, want it unverified", err)
	}
}

// TestReadSBOM: the index's SBOM where ko built an index, the one image's
// where it built one platform, and an error where neither is one file.
func TestReadSBOM(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("webhook-index.spdx.json", "index")
	write("webhook-linux-amd64.spdx.json", "amd64")
	write("webhook-linux-arm64.spdx.json", "arm64")
	write("bridge-linux-amd64.spdx.json", "one")
	write("v2-linux-amd64.spdx.json", "a")
	write("v2-linux-arm64.spdx.json", "b")
	for app, want := range map[string]string{"webhook": "index", "bridge": "one"} {
		if b, err := readSBOM(dir, app); err != nil || string(b) != want {
			t.Errorf("readSBOM(%s) = %q, %v; want %q", app, b, err, want)
		}
	}
	for _, app := range []string{"v2", "allinone"} {
		if b, err := readSBOM(dir, app); err == nil {
			t.Errorf("readSBOM(%s) = %q, want an error: no index and not one platform's", app, b)
		}
	}
}
