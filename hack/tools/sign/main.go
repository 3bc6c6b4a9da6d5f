// Command sign signs a release the way cosign does, with a key, and checks
// it with cosign's own verification code: hack/release.sh calls it, and
// hack/ko-resolve.sh verifies the release it made. It is a module of its own
// (hack/tools/sign): cosign's dependencies never reach istio-aux's build.
//
//	sign keygen -dir DIR
//	    cosign.key (encrypted with COSIGN_PASSWORD, which may be empty) and
//	    cosign.pub, as `cosign generate-key-pair` writes them.
//	sign images -key cosign.key [-sbom DIR] -commit SHA -command CMD image...
//	    each image (REPO/NAME:TAG@sha256:DIGEST) signed (cosign's simple
//	    signing, the .sig tag) with its attestations (the .att tag): a SLSA
//	    v1 provenance naming the source commit and the build command, and,
//	    with -sbom, its SBOM as ko wrote it: DIR/NAME-index.spdx.json for
//	    an index, DIR/NAME-OS-ARCH.spdx.json for a build of one platform (a
//	    Helm chart pushed as an OCI artifact has none).
//	sign blob -key cosign.key FILE...
//	    FILE.sig beside each FILE: the base64 signature `cosign sign-blob
//	    --key` writes.
//	sign verify -key cosign.pub -commit SHA [-sbom=false] [-blob FILE]... image...
//	    every image's signature, provenance (whose commit must be SHA) and
//	    SBOM (unless -sbom=false), and every FILE against FILE.sig; fails on
//	    the first that does not verify.
//
// The signatures are cosign's classic format (the .sig and .att tags), which
// `cosign verify --key cosign.pub --insecure-ignore-tlog` and Kyverno's
// verifyImages accept; nothing is uploaded to a transparency log (a release
// made here cannot reach one), so verifiers skip the log
// (--insecure-ignore-tlog, Kyverno's ignoreTlog).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx := context.Background()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "keygen":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		dir := fs.String("dir", ".", "where to write cosign.key and cosign.pub")
		_ = fs.Parse(args)
		err = keygen(*dir, password())
	case "images":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		key := fs.String("key", "", "the private key (cosign.key)")
		sbom := fs.String("sbom", "", "the directory of ko's SBOMs (NAME-index.spdx.json, or NAME-OS-ARCH.spdx.json for one platform)")
		commit := fs.String("commit", "", "the source commit the images were built from")
		command := fs.String("command", "", "the command that built them")
		_ = fs.Parse(args)
		var s *signer
		if s, err = loadSigner(*key, password()); err == nil {
			err = s.images(ctx, fs.Args(), *sbom, provenanceInputs{commit: *commit, command: *command})
		}
	case "blob":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		key := fs.String("key", "", "the private key (cosign.key)")
		_ = fs.Parse(args)
		var s *signer
		if s, err = loadSigner(*key, password()); err == nil {
			err = s.blobs(fs.Args())
		}
	case "verify":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		key := fs.String("key", "", "the public key (cosign.pub)")
		commit := fs.String("commit", "", "the source commit the provenance must name")
		sbom := fs.Bool("sbom", true, "require an SBOM attestation")
		var blobs list
		fs.Var(&blobs, "blob", "a file signed beside it (FILE.sig); repeat")
		_ = fs.Parse(args)
		var v *verifier
		if v, err = loadVerifier(*key); err == nil {
			v.sbom = *sbom
			err = v.all(ctx, fs.Args(), blobs, *commit)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sign:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: sign keygen|images|blob|verify ... (see the package comment)")
	os.Exit(2)
}

// password is COSIGN_PASSWORD, as cosign reads it; unset is empty.
func password() []byte { return []byte(os.Getenv("COSIGN_PASSWORD")) }

// list is a repeatable flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// errVerify marks what did not verify, as opposed to what could not be read.
var errVerify = errors.New("not verified")
