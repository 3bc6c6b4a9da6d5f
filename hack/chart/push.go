package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"helm.sh/helm/v4/pkg/registry"
)

// Push uploads a packaged chart to an OCI repository (oci://HOST/PATH), as
// `helm push` does, with Helm's own registry client, and returns the
// chart's reference by tag and digest (HOST/PATH/istio-aux:VERSION@sha256:…),
// which make release signs. A registry is spoken to over plain HTTP where
// ko and crane (go-containerregistry) speak to it so, the images' pushes
// before it: on localhost, a loopback or a private (RFC 1918) address, as
// the harness's registries are; any other over HTTPS.
func Push(archive, repo, version string) (string, error) {
	host, ok := strings.CutPrefix(repo, "oci://")
	if !ok || host == "" {
		return "", fmt.Errorf("push %s: want oci://HOST/PATH", repo)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		return "", err
	}
	opts := []registry.ClientOption{registry.ClientOptWriter(io.Discard)}
	if plainHTTP(host) {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	c, err := registry.NewClient(opts...)
	if err != nil {
		return "", err
	}
	// OCI tags cannot hold '+': Helm writes it as '_'.
	ref := strings.TrimSuffix(host, "/") + "/istio-aux:" + strings.ReplaceAll(strings.TrimPrefix(version, "v"), "+", "_")
	res, err := c.Push(data, ref)
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref + "@" + res.Manifest.Digest, nil
}

// plainHTTP reports whether go-containerregistry speaks plain HTTP to
// the repository's registry (HOST[:PORT]/PATH).
func plainHTTP(repo string) bool {
	hostport, _, _ := strings.Cut(repo, "/")
	reg, err := name.NewRegistry(hostport)
	return err == nil && reg.Scheme() == "http"
}
