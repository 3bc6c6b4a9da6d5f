package operators

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"time"
)

// WebhookCert names what an operator's certificate rotator (OPA
// cert-controller) keeps in its Secret.
type WebhookCert struct {
	Secret  string // the Secret its webhook Deployment mounts
	CAName  string // the CA's subject and DNS name
	DNSName string // <service>.<namespace>.svc
}

// certValidity is how long the certificates last: the rotator replaces
// any that expire within 90 days.
const certValidity = 365 * 24 * time.Hour

// SecretData is a CA and a serving certificate in the form the rotator
// accepts as valid (ca.crt naming CAName, ca.key PKCS#1 RSA, tls.crt for
// DNSName signed by it), so that it keeps them. Left empty, as upstream's
// manifests leave it, the rotator fills the Secret after the pod started,
// and the webhook serves only once the kubelet refreshes the mounted
// volume: up to a minute and more later (its sync period).
func (w WebhookCert) SecretData() (map[string][]byte, error) {
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: w.CAName}, DNSNames: []string{w.CAName},
		NotBefore: now, NotAfter: now.Add(certValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true,
	}
	ca, caKey, err := sign(caTmpl, nil, nil)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: w.DNSName}, DNSNames: []string{w.DNSName},
		NotBefore: now, NotAfter: now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true,
	}
	cert, key, err := sign(tmpl, ca, caKey)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"ca.crt":  pemOf("CERTIFICATE", ca.Raw),
		"ca.key":  pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(caKey)),
		"tls.crt": pemOf("CERTIFICATE", cert.Raw),
		"tls.key": pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)),
	}, nil
}

// sign makes a new RSA key (the rotator reads only PKCS#1 RSA) and a
// certificate for it from tmpl, signed by parent's key, or self-signed
// when parent is nil.
func sign(tmpl, parent *x509.Certificate, parentKey *rsa.PrivateKey) (*x509.Certificate, *rsa.PrivateKey, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
