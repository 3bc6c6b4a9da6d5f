package istio

import (
	"context"
	"path/filepath"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// EnvoyBin is the Envoy stand-in (test/cmd/envoy), built static by
// hack/build-ours.sh or EnsureEnvoy: the proxy image is distroless.
func EnvoyBin() string { return filepath.Join(cluster.CacheDir(), "envoy-standin", "envoy") }

// EnsureEnvoy builds the Envoy stand-in into EnvoyBin unless it is there.
func EnsureEnvoy(ctx context.Context) error {
	return cluster.EnsureBuilt(ctx, EnvoyBin(), "./test/cmd/envoy", "CGO_ENABLED=0")
}
