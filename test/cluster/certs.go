package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// CA is a throw-away certificate authority for one test cluster: it signs the
// apiserver's serving certificate and any webhook a test serves on 127.0.0.1.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// validity is how long test certificates last. More than a day on purpose:
// knative.dev/pkg's certificate reconciler replaces a webhook certificate
// that expires within a day (with one lacking our 127.0.0.1 SAN).
const validity = 7 * 24 * time.Hour

// NewCA creates a self-signed CA valid for a week.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := stamp(&x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	})
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// stamp gives tmpl a serial number and the test validity.
func stamp(tmpl *x509.Certificate) *x509.Certificate {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = n, time.Now().Add(-time.Hour), time.Now().Add(validity)
	return tmpl
}

// Issue signs a certificate for a new P-256 key with the subject, usages
// and names of tmpl (its serial number and validity are set here), and
// returns the certificate and the key as PEM.
func (ca *CA) Issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, stamp(tmpl), ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the certificate of %s: %w", tmpl.Subject, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

// Serving issues a server certificate for 127.0.0.1, ::1, localhost and the
// given DNS names. It returns the certificate and key as PEM.
func (ca *CA) Serving(dnsNames ...string) (certPEM, keyPEM []byte, err error) {
	return ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    append([]string{"localhost"}, dnsNames...),
	})
}

// IssueCert issues a certificate from the cluster's CA for cn with the
// given organizations (groups, for a client), IP and DNS names, for server
// or client use, and writes the certificate and key as PEM to
// Dir()/name.crt and Dir()/name.key.
func (c *Cluster) IssueCert(name, cn string, orgs []string, ips []net.IP, dns []string, usage x509.ExtKeyUsage) error {
	cert, key, err := c.ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: ips,
		DNSNames:    dns,
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.path(name+".crt"), cert, 0o600); err != nil {
		return err
	}
	return os.WriteFile(c.path(name+".key"), key, 0o600)
}

// serviceAccountKey is the RSA key pair the apiserver signs and verifies
// service-account tokens with.
func serviceAccountKey() (privPEM, pubPEM []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, fmt.Errorf("generating service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)), pemBlock("PUBLIC KEY", pub), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
