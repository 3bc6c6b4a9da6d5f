package knative

import (
	"context"
	_ "embed"
	"path/filepath"
	"strings"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/realnode"
)

// TraefikVersion is the github.com/traefik/traefik/v3 version that
// hack/tools/traefik requires and hack/build-knative.sh caches under;
// TestVersionsMatchTools keeps them equal.
const TraefikVersion = "v3.6.12"

// TraefikBin is the cached static Traefik build (hack/build-knative.sh).
func TraefikBin() string {
	return filepath.Join(cluster.CacheDir(), "traefik-"+TraefikVersion, "bin", "traefik")
}

const traefikNamespace = "traefik"

// traefikManifests run Traefik as Knative's networking layer, as its
// documentation for the Knative provider says: the provider's RBAC
// (docs/content/reference/dynamic-configuration/kubernetes-knative-rbac.yml
// in the module), one private entry point for cluster-local routes and the
// Service that Knative's Routes then point their address at
// (domainInternal: traefik-internal.traefik.svc.cluster.local). The
// provider writes a KIngress's status only after its throttle, so that
// Ready means routed.
//
//go:embed traefik.yaml
var traefikManifests string

// installTraefik pushes Traefik's image and applies traefikManifests.
func installTraefik(ctx context.Context, c *cluster.Cluster) error {
	img := images.Image{
		Ref:        images.Registry + "/traefik:" + TraefikVersion,
		Files:      []images.File{{Path: "/traefik", Mode: 0o755, Src: TraefikBin()}},
		Entrypoint: []string{"/traefik"},
	}
	if err := realnode.PushImage(ctx, img); err != nil {
		return err
	}
	return c.Apply(ctx, []byte(strings.ReplaceAll(traefikManifests, "{{image}}", img.Ref)))
}
