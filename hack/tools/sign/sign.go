package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v3/pkg/cosign"
	"github.com/sigstore/cosign/v3/pkg/cosign/attestation"
	"github.com/sigstore/cosign/v3/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v3/pkg/oci/remote"
	"github.com/sigstore/cosign/v3/pkg/oci/static"
	"github.com/sigstore/cosign/v3/pkg/types"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// keygen writes cosign.key (encrypted with password) and cosign.pub into dir.
func keygen(dir string, password []byte) error {
	keys, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return password, nil })
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cosign.key"), keys.PrivateBytes, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cosign.pub"), keys.PublicBytes, 0o644) //nolint:gosec // a public key
}

type signer struct {
	sv signature.SignerVerifier
}

// loadSigner reads a cosign private key; decrypting it (scrypt) takes about
// a second, so a signer is loaded once.
func loadSigner(path string, password []byte) (*signer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sv, err := cosign.LoadPrivateKey(raw, password, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &signer{sv: sv}, nil
}

// registryOpts is how every call reaches the registry: ggcr's defaults
// (plain HTTP for 127.0.0.1 and localhost, the keychain of ~/.docker).
func registryOpts(ctx context.Context) []ociremote.Option {
	return []ociremote.Option{ociremote.WithRemoteOptions(remote.WithContext(ctx))}
}

type provenanceInputs struct {
	commit, command string
}

// images signs each image and attaches its SBOM and provenance.
func (s *signer) images(ctx context.Context, refs []string, sbomDir string, in provenanceInputs) error {
	if len(refs) == 0 {
		return fmt.Errorf("no images to sign")
	}
	if in.commit == "" || in.command == "" {
		return fmt.Errorf("the provenance needs -commit and -command")
	}
	for _, ref := range refs {
		if err := s.image(ctx, ref, sbomDir, in); err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
	}
	return nil
}

func (s *signer) image(ctx context.Context, ref, sbomDir string, in provenanceInputs) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	ro := registryOpts(ctx)
	d, err := ociremote.ResolveDigest(r, ro...)
	if err != nil {
		return err
	}
	if pinned, ok := r.(name.Digest); ok && pinned.DigestStr() != d.DigestStr() {
		return fmt.Errorf("the registry serves %s under this name, not the digest pinned", d.DigestStr())
	}

	// The signature: cosign's simple-signing payload naming the digest.
	body, err := payload.Cosign{Image: d}.MarshalJSON()
	if err != nil {
		return err
	}
	raw, err := s.sv.SignMessage(bytes.NewReader(body))
	if err != nil {
		return err
	}
	sig, err := static.NewSignature(body, base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		return err
	}
	se, err := mutate.AttachSignatureToEntity(ociremote.SignedUnknown(d, ro...), sig)
	if err != nil {
		return err
	}
	if err := ociremote.WriteSignatures(d.Repository, se, ro...); err != nil {
		return err
	}

	// The attestations: in-toto statements about the digest, in DSSE
	// envelopes signed with the same key.
	prov, err := provenance(d, in)
	if err != nil {
		return err
	}
	type predicate struct {
		kind string
		body []byte
	}
	predicates := []predicate{{"slsaprovenance1", prov}}
	if sbomDir != "" {
		sbom, err := readSBOM(sbomDir, appName(d.RepositoryStr()))
		if err != nil {
			return fmt.Errorf("its SBOM: %w", err)
		}
		predicates = append(predicates, predicate{"spdxjson", sbom})
	}
	se = ociremote.SignedUnknown(d, ro...)
	for _, a := range predicates {
		st, err := attestation.GenerateStatement(attestation.GenerateOpts{
			Predicate: bytes.NewReader(a.body), Type: a.kind,
			Digest: strings.TrimPrefix(d.DigestStr(), "sha256:"), Repo: d.Repository.String(),
		})
		if err != nil {
			return fmt.Errorf("%s statement: %w", a.kind, err)
		}
		statement, err := json.Marshal(st)
		if err != nil {
			return err
		}
		envelope, err := dsse.WrapSigner(s.sv, types.IntotoPayloadType).SignMessage(bytes.NewReader(statement))
		if err != nil {
			return err
		}
		att, err := static.NewAttestation(envelope, static.WithLayerMediaType(types.DssePayloadType),
			static.WithAnnotations(map[string]string{"predicateType": st.PredicateType}))
		if err != nil {
			return err
		}
		if se, err = mutate.AttachAttestationToEntity(se, att); err != nil {
			return err
		}
	}
	return ociremote.WriteAttestations(d.Repository, se, ro...)
}

// appName is the image's name in its repository (REPO/NAME), which ko
// names after the binary, as it names the SBOM.
func appName(repository string) string {
	return repository[strings.LastIndex(repository, "/")+1:]
}

// provenance is a SLSA v1 provenance predicate: what was built (the
// image's digest is the statement's subject), from which commit, by which
// command, when.
func provenance(d name.Digest, in provenanceInputs) ([]byte, error) {
	now := time.Now().UTC().Format(time.RFC3339)
	source := map[string]any{
		"uri":    "git+https://github.com/istio-aux/istio-aux",
		"digest": map[string]string{"gitCommit": in.commit},
	}
	return json.Marshal(map[string]any{
		"buildDefinition": map[string]any{
			"buildType": "https://github.com/istio-aux/istio-aux/hack/release.sh@v1",
			"externalParameters": map[string]any{
				"source":  source,
				"command": in.command,
				"image":   d.String(),
			},
			"resolvedDependencies": []any{source},
		},
		"runDetails": map[string]any{
			"builder":  map[string]any{"id": "https://github.com/istio-aux/istio-aux/hack/release.sh"},
			"metadata": map[string]any{"startedOn": now, "finishedOn": now},
		},
	})
}

// blobs writes FILE.sig beside each FILE: the base64 of the key's
// signature over the file's bytes, as `cosign sign-blob --key` writes it.
func (s *signer) blobs(files []string) error {
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		sig, err := s.sv.SignMessage(bytes.NewReader(raw))
		if err != nil {
			return err
		}
		if err := os.WriteFile(f+".sig", []byte(base64.StdEncoding.EncodeToString(sig)), 0o644); err != nil { //nolint:gosec // a signature is public
			return err
		}
	}
	return nil
}

// readSBOM reads the SBOM ko wrote for the image of app into dir: the
// index's (APP-index.spdx.json) for a build of several platforms, the one
// image's (APP-OS-ARCH.spdx.json) for a build of one, on a base that is an
// image rather than an index.
func readSBOM(dir, app string) ([]byte, error) {
	if b, err := os.ReadFile(filepath.Join(dir, app+"-index.spdx.json")); !errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	one, err := filepath.Glob(filepath.Join(dir, app+"-*.spdx.json"))
	if err != nil {
		return nil, err
	}
	if len(one) != 1 {
		return nil, fmt.Errorf("in %s: no %s-index.spdx.json and %d files %s-*.spdx.json, want one", dir, app, len(one), app)
	}
	return os.ReadFile(one[0])
}
