package istio

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/istio-aux/istio-aux/test/images"
)

// ProxyImageContents is the proxy image (ProxyImage) for a real node, laid
// out as Istio's proxyv2 image (pilot/docker/Dockerfile.proxyv2) where it
// matters:
//   - pilot-agent at /usr/local/bin/pilot-agent, the entrypoint (injected
//     pods pass `proxy sidecar …`; the quit is `pilot-agent request POST
//     quitquitquit`, argv without a shell);
//   - the Envoy stand-in at /usr/local/bin/envoy, ProxyConfig's default
//     binaryPath, so no mesh setting points elsewhere;
//   - Envoy's bootstrap template at /var/lib/istio/envoy/;
//   - /etc/passwd and /etc/group naming uid and gid 1337 (istio-proxy),
//     which the injected container runs as;
//   - no shell and no curl, like the distroless variant (which, unlike
//     this one, also carries iptables for istio-init; interceptionMode
//     NONE makes it unnecessary here).
//
// It holds no workload certificates: the injected pod mounts an emptyDir
// over /var/run/secrets/workload-spiffe-credentials, which would hide them,
// and the agent does not need them to start. Without them it asks the CA
// (istiod.istio-system.svc, unreachable here) for a certificate, logs each
// failure and keeps retrying, while Envoy, which here never asks for one
// over SDS, gets ready and quits normally (agent_e2e_test.go). It does need
// /var/run/secrets/istio/root-cert.pem, which the pod mounts from the
// istio-ca-root-cert ConfigMap that istiod publishes in every namespace.
// r is the release whose pilot-agent and bootstrap template it holds;
// envoy is EnvoyBin(). It fails if a file to copy is missing.
func ProxyImageContents(r Release, envoy string) (images.Image, error) {
	img := images.Image{
		Ref: r.ProxyImage(),
		Files: []images.File{
			{Path: "/usr/local/bin/pilot-agent", Mode: 0o755, Src: filepath.Join(r.BinDir(), "pilot-agent")},
			{Path: "/usr/local/bin/envoy", Mode: 0o755, Src: envoy},
			{Path: "/" + BootstrapTemplatePath, Mode: 0o644, Src: r.BootstrapTemplate()},
			{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nistio-proxy:x:1337:1337:istio-proxy:/home/istio-proxy:/sbin/nologin\n")},
			{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nistio-proxy:x:1337:\n")},
		},
		Entrypoint: []string{"/usr/local/bin/pilot-agent"},
		// As Istio's image: the version the agent reports for its Envoy.
		Env: []string{"ISTIO_META_ISTIO_PROXY_SHA=istio-aux-envoy-standin"},
		// Istio's image sets no user: the injected securityContext runs
		// the container as 1337.
		WorkingDir: "/",
	}
	for _, f := range img.Files {
		if f.Src == "" {
			continue
		}
		if _, err := os.Stat(f.Src); err != nil {
			return images.Image{}, fmt.Errorf("proxy image %s: %w (run hack/build-istio.sh and hack/build-ours.sh)", f.Path, err)
		}
	}
	return img, nil
}
