package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"os"
	"time"
)

// Certificates of the real node, all from the cluster CA: the kubelet's
// serving certificate (the API server checks it against the CA, and dials
// the node IP), the kubelet's client certificate (user system:node:<node>
// in group system:nodes, which is how the API server knows a kubelet), and
// the API server's client certificate for the kubelet (exec, logs).

// certFor issues a certificate for cn with the given organizations (groups,
// for a client), IP and DNS names, for server or client use, and writes the
// certificate and key as PEM to c.path(name+".crt"/".key").
func (c *Cluster) certFor(name, cn string, orgs []string, ips []net.IP, dns []string, usage x509.ExtKeyUsage) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca.Cert, &key.PublicKey, c.ca.Key)
	if err != nil {
		return fmt.Errorf("signing %s certificate: %w", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.path(name+".crt"), pemBlock("CERTIFICATE", der), 0o600); err != nil {
		return err
	}
	return os.WriteFile(c.path(name+".key"), pemBlock("EC PRIVATE KEY", keyDER), 0o600)
}

// addAPIServerNodeArgs adds the kube-apiserver flags a real node needs:
// client certificates are accepted (the kubelet's identity), and the API
// server presents one to the kubelet, which lets nobody in anonymously.
func (c *Cluster) addAPIServerNodeArgs() error {
	if !c.opts.Node {
		return nil
	}
	if err := c.certFor("apiserver-kubelet-client", apiServerKubeletUser, nil, nil, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return err
	}
	c.extraArgs = map[string][]string{"kube-apiserver": {
		"--client-ca-file=" + c.path("ca.crt"),
		"--kubelet-client-certificate=" + c.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + c.path("apiserver-kubelet-client.key"),
	}}
	return nil
}

// apiServerKubeletUser is the API server's user name towards the kubelet,
// as kubeadm names it.
const apiServerKubeletUser = "kube-apiserver-kubelet-client"

// kubeletCerts issues the kubelet's serving and client certificates.
func (c *Cluster) kubeletCerts() error {
	ips := []net.IP{net.ParseIP(NodeIP), net.IPv4(127, 0, 0, 1)}
	if err := c.certFor("kubelet-serving", RealNodeName, nil, ips, []string{RealNodeName}, x509.ExtKeyUsageServerAuth); err != nil {
		return err
	}
	return c.certFor("kubelet-client", "system:node:"+RealNodeName, []string{"system:nodes"}, nil, nil, x509.ExtKeyUsageClientAuth)
}
