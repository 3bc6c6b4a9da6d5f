package istio

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"time"

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
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	id := &url.URL{Scheme: "spiffe", Host: "cluster.local", Path: fmt.Sprintf("/ns/%s/sa/%s", namespace, serviceAccount)}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"cluster.local"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing workload certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		WorkloadCertsDir + "/cert-chain.pem": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		WorkloadCertsDir + "/key.pem":        pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		WorkloadCertsDir + "/root-cert.pem":  ca.CertPEM,
	}, nil
}
