package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"helm.sh/helm/v4/pkg/registry"
)

// Push uploads a packaged chart to an OCI repository (oci://HOST/PATH), as
// `helm push` does, with Helm's own registry client, and returns the
// chart's reference by tag and digest (HOST/PATH/istio-aux:VERSION@sha256:…),
// which make release signs. A registry on a loopback address is spoken to
// over plain HTTP (the harness's); any other over HTTPS.
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
	if loopback(host) {
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

// loopback reports whether the registry's host (HOST[:PORT]/PATH) is on a
// loopback address or localhost.
func loopback(repo string) bool {
	hostport, _, _ := strings.Cut(repo, "/")
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		h = hostport
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
