package realnode

import (
	"crypto/x509"
	"net"
	"path/filepath"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// Certificates of the real node, all from the cluster CA: the kubelet's
// serving certificate (the API server checks it against the CA, and dials
// the node IP), the kubelet's client certificate (user system:node:<node>
// in group system:nodes, which is how the API server knows a kubelet), and
// the API server's client certificate for the kubelet (exec, logs).

// APIServerArgs are the kube-apiserver flags a real node needs: client
// certificates are accepted (the kubelet's identity), and the API server
// presents one to the kubelet, which lets nobody in anonymously.
func (n *Node) APIServerArgs(c *cluster.Cluster) ([]string, error) {
	if err := c.IssueCert("apiserver-kubelet-client", apiServerKubeletUser, nil, nil, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	path := func(name string) string { return filepath.Join(c.Dir(), name) }
	return []string{
		"--client-ca-file=" + path("ca.crt"),
		"--kubelet-client-certificate=" + path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + path("apiserver-kubelet-client.key"),
	}, nil
}

// apiServerKubeletUser is the API server's user name towards the kubelet,
// as kubeadm names it.
const apiServerKubeletUser = "kube-apiserver-kubelet-client"

// kubeletCerts issues the kubelet's serving and client certificates.
func (n *Node) kubeletCerts() error {
	ips := []net.IP{net.ParseIP(NodeIP), net.IPv4(127, 0, 0, 1)}
	if err := n.c.IssueCert("kubelet-serving", RealNodeName, nil, ips, []string{RealNodeName}, x509.ExtKeyUsageServerAuth); err != nil {
		return err
	}
	return n.c.IssueCert("kubelet-client", "system:node:"+RealNodeName, []string{"system:nodes"}, nil, nil, x509.ExtKeyUsageClientAuth)
}
