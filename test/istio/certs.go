package istio

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/url"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// Paths pilot-agent reads, relative to its working directory (the
// container's root in a pod).
const (
	// WorkloadCertsDir holds file-mounted workload certificates; with all
	// three files there the agent never dials a CA.
	WorkloadCertsDir = "var/run/secrets/workload-spiffe-credentials"
	// IstioCARootCert is where the injected pod mounts the
	// istio-ca-root-cert ConfigMap istiod publishes in every namespace;
	// without file-mounted certificates the agent refuses to start when it
	// is missing.
	IstioCARootCert = "var/run/secrets/istio/root-cert.pem"
	// BootstrapTemplatePath is where the agent reads Envoy's bootstrap
	// template.
	BootstrapTemplatePath = "var/lib/istio/envoy/envoy_bootstrap_tmpl.json"
)

// WorkloadCerts issues what Istio's CA would give the pod's proxy: a
// certificate for spiffe://cluster.local/ns/<namespace>/sa/<sa>, keyed by
// the files pilot-agent reads under WorkloadCertsDir (cert-chain.pem,
// key.pem, root-cert.pem).
func WorkloadCerts(ca *cluster.CA, namespace, serviceAccount string) (map[string][]byte, error) {
	id := &url.URL{Scheme: "spiffe", Host: "cluster.local", Path: fmt.Sprintf("/ns/%s/sa/%s", namespace, serviceAccount)}
	cert, key, err := ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{Organization: []string{"cluster.local"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{id},
	})
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		WorkloadCertsDir + "/cert-chain.pem": cert,
		WorkloadCertsDir + "/key.pem":        key,
		WorkloadCertsDir + "/root-cert.pem":  ca.CertPEM,
	}, nil
}
