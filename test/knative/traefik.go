package knative

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/realnode"
)

// TraefikVersion is the github.com/traefik/traefik/v3 version that
// hack/tools/traefik requires and hack/build-knative.sh caches under;
// TestTraefikVersionMatchesTools keeps them equal.
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
const traefikManifests = `apiVersion: v1
kind: Namespace
metadata:
  name: traefik
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: traefik
  namespace: traefik
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: traefik-knative
rules:
  - apiGroups: [""]
    resources: [services, secrets]
    verbs: [get, list, watch]
  - apiGroups: [networking.internal.knative.dev]
    resources: [ingresses]
    verbs: [get, list, watch]
  - apiGroups: [networking.internal.knative.dev]
    resources: [ingresses/status]
    verbs: [update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: traefik-knative
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: traefik-knative
subjects:
  - kind: ServiceAccount
    name: traefik
    namespace: traefik
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: traefik
  namespace: traefik
spec:
  replicas: 1
  selector:
    matchLabels: {app: traefik}
  template:
    metadata:
      labels: {app: traefik}
    spec:
      serviceAccountName: traefik
      containers:
        - name: traefik
          image: {{image}}
          args:
            - --global.checknewversion=false
            - --global.sendanonymoususage=false
            - --entrypoints.traefik.address=:8080
            - --entrypoints.private.address=:8081
            - --ping=true
            - --experimental.knative=true
            - --providers.knative=true
            - --providers.knative.privateEntrypoints=private
            - --providers.knative.privateService.name=traefik-internal
            - --providers.knative.privateService.namespace=traefik
            - --providers.knative.throttleDuration=2s
          ports:
            - {name: private, containerPort: 8081}
          readinessProbe:
            httpGet: {path: /ping, port: 8080}
            periodSeconds: 2
          resources:
            requests: {cpu: 25m, memory: 64Mi}
          securityContext:
            runAsUser: 65532
            runAsNonRoot: true
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
---
apiVersion: v1
kind: Service
metadata:
  name: traefik-internal
  namespace: traefik
spec:
  selector: {app: traefik}
  ports:
    - {name: http, port: 80, targetPort: 8081}
`

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
