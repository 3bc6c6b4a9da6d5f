package istio

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// EnvoyBin is the Envoy stand-in (test/cmd/envoy), built static by
// hack/build-ours.sh or EnsureEnvoy: the proxy image is distroless.
func EnvoyBin() string { return filepath.Join(cluster.CacheDir(), "envoy-standin", "envoy") }

// EnsureEnvoy builds the Envoy stand-in into EnvoyBin unless it is there.
func EnsureEnvoy(ctx context.Context) error {
	if _, err := os.Stat(EnvoyBin()); err == nil {
		return nil
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", EnvoyBin(), "./test/cmd/envoy")
	cmd.Dir = cluster.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the Envoy stand-in: %w: %s", err, out)
	}
	return nil
}
