package main

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/cosign/v3/pkg/cosign"
	"github.com/sigstore/cosign/v3/pkg/oci"
	"github.com/sigstore/cosign/v3/pkg/oci/static"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// The predicate types of the two attestations every image carries.
const (
	spdxPredicate = "https://spdx.dev/Document"
	slsaPredicate = "https://slsa.dev/provenance/v1"
)

type verifier struct {
	v signature.Verifier
	// sbom: an image must carry an SBOM attestation (a chart has none).
	sbom bool
}

func loadVerifier(path string) (*verifier, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, err
	}
	return &verifier{v: v, sbom: true}, nil
}

func (v *verifier) all(ctx context.Context, images, blobs []string, commit string) error {
	if len(images) == 0 && len(blobs) == 0 {
		return fmt.Errorf("nothing to verify")
	}
	for _, ref := range images {
		if err := v.image(ctx, ref, commit); err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		what := "signature, SLSA provenance"
		if v.sbom {
			what += ", SPDX SBOM"
		}
		fmt.Printf("verified %s: %s of %s\n", ref, what, commit)
	}
	for _, f := range blobs {
		if err := v.blob(ctx, f); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		fmt.Printf("verified %s against %s.sig\n", f, f)
	}
	return nil
}

// claimVerifier is how cosign checks what a signature's payload claims.
type claimVerifier = func(oci.Signature, v1.Hash, map[string]any) error

// checkOpts are cosign's options for a key and no transparency log, with
// claims checking the payload (nil for a blob, which has no claims).
func (v *verifier) checkOpts(ctx context.Context, claims claimVerifier) *cosign.CheckOpts {
	return &cosign.CheckOpts{
		RegistryClientOpts: registryOpts(ctx),
		SigVerifier:        v.v,
		IgnoreTlog:         true,
		IgnoreSCT:          true,
		ClaimVerifier:      claims,
	}
}

// image verifies, with cosign's own code, that the image the reference
// names now (by tag, when it has one: what a pull would get) is signed
// with the key, and carries an SBOM and a provenance naming commit, both
// signed with the key and both about this digest.
func (v *verifier) image(ctx context.Context, ref, commit string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	if t, ok := byTag(ref); ok {
		// Pinned and tagged: the tag too, as the registry resolves it, so
		// that a tag moved to other bytes fails.
		if err := v.image(ctx, t.String(), commit); err != nil {
			return fmt.Errorf("by tag: %w", err)
		}
	}
	if _, _, err := cosign.VerifyImageSignatures(ctx, r, v.checkOpts(ctx, cosign.SimpleClaimVerifier)); err != nil {
		return fmt.Errorf("signature %w: %w", errVerify, err)
	}
	atts, _, err := cosign.VerifyImageAttestations(ctx, r, v.checkOpts(ctx, cosign.IntotoSubjectClaimVerifier))
	if err != nil {
		return fmt.Errorf("attestations %w: %w", errVerify, err)
	}
	var seen []string
	for _, a := range atts {
		raw, err := a.Payload()
		if err != nil {
			return err
		}
		st, err := statementOf(raw)
		if err != nil {
			return err
		}
		seen = append(seen, st.PredicateType)
		if st.PredicateType == slsaPredicate {
			if got := st.commit(); got != commit {
				return fmt.Errorf("provenance %w: built from %q, want %q", errVerify, got, commit)
			}
		}
	}
	want := []string{slsaPredicate}
	if v.sbom {
		want = append(want, spdxPredicate)
	}
	for _, want := range want {
		if !slices.Contains(seen, want) {
			return fmt.Errorf("attestations %w: no %s among %v", errVerify, want, seen)
		}
	}
	return nil
}

// byTag is the tag of REPO/NAME:TAG@DIGEST, if it has one.
func byTag(ref string) (name.Tag, bool) {
	n, _, pinned := strings.Cut(ref, "@")
	if !pinned {
		return name.Tag{}, false
	}
	t, err := name.NewTag(n, name.StrictValidation)
	return t, err == nil
}

// statement is the part of an in-toto statement read here.
type statement struct {
	PredicateType string `json:"predicateType"`
	Predicate     struct {
		BuildDefinition struct {
			ExternalParameters struct {
				Source struct {
					Digest map[string]string `json:"digest"`
				} `json:"source"`
			} `json:"externalParameters"`
		} `json:"buildDefinition"`
	} `json:"predicate"`
}

func (s statement) commit() string {
	return s.Predicate.BuildDefinition.ExternalParameters.Source.Digest["gitCommit"]
}

// statementOf opens a DSSE envelope (whose signature cosign has verified).
func statementOf(envelope []byte) (statement, error) {
	var env struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
	}
	var st statement
	if err := json.Unmarshal(envelope, &env); err != nil {
		return st, fmt.Errorf("attestation: %w", err)
	}
	raw, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return st, fmt.Errorf("attestation payload: %w", err)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("attestation statement: %w", err)
	}
	return st, nil
}

// blob verifies FILE against FILE.sig, as `cosign verify-blob --key
// cosign.pub --signature FILE.sig --insecure-ignore-tlog FILE` does.
func (v *verifier) blob(ctx context.Context, file string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	b64, err := os.ReadFile(file + ".sig")
	if err != nil {
		return err
	}
	sig, err := static.NewSignature(raw, string(b64))
	if err != nil {
		return err
	}
	if _, err := cosign.VerifyBlobSignature(ctx, sig, v.checkOpts(ctx, nil)); err != nil {
		return fmt.Errorf("%w: %w", errVerify, err)
	}
	return nil
}
