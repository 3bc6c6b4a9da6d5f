package istio

import (
	"encoding/json"
	"fmt"
	"os"
)

// AgentFiles is a sandbox root as the proxy image gives pilot-agent its
// files (the bootstrap template), plus extra (certificates, say).
func AgentFiles(extra map[string][]byte) (map[string][]byte, error) {
	tmpl, err := os.ReadFile(BootstrapTemplate())
	if err != nil {
		return nil, fmt.Errorf("bootstrap template (run hack/build-istio.sh): %w", err)
	}
	files := map[string][]byte{BootstrapTemplatePath: tmpl}
	for k, v := range extra {
		files[k] = v
	}
	return files, nil
}

// AgentEnv is the environment an injected istio-proxy container gives
// pilot-agent, as far as it matters outside a cluster, with proxyConfig
// (ProxyConfig fields, e.g. binaryPath, terminationDrainDuration) as
// PROXY_CONFIG. CLOUD_PLATFORM=none spares the agent probing cloud
// metadata servers.
func AgentEnv(pod, namespace string, proxyConfig map[string]any) ([]string, error) {
	pc, err := json.Marshal(proxyConfig)
	if err != nil {
		return nil, err
	}
	return []string{
		"POD_NAME=" + pod, "POD_NAMESPACE=" + namespace, "SERVICE_ACCOUNT=" + ServiceAccount,
		"INSTANCE_IP=127.0.0.1", "HOST_IP=127.0.0.1",
		"PILOT_CERT_PROVIDER=istiod", "CA_ADDR=istiod." + Namespace + ".svc:15012",
		"TRUST_DOMAIN=cluster.local", "ISTIO_META_CLUSTER_ID=Kubernetes",
		"CLOUD_PLATFORM=none",
		"PROXY_CONFIG=" + string(pc),
	}, nil
}
