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

// APIServerArgs are the kube-apiserver flags real nodes need: client
// certificates are accepted (the kubelets' identity), and the API server
// presents one to the kubelets, which let nobody in anonymously. The control
// plane's machine is no node and runs no kube-proxy, as a managed control
// plane: the API server reaches webhooks and aggregated APIs at their pods'
// addresses (their Services' endpoints), not at cluster IPs.
func (ns *Nodes) APIServerArgs(c *cluster.Cluster) ([]string, error) {
	if err := c.IssueCert("apiserver-kubelet-client", apiServerKubeletUser, nil, nil, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	path := func(name string) string { return filepath.Join(c.Dir(), name) }
	return []string{
		"--client-ca-file=" + path("ca.crt"),
		"--kubelet-client-certificate=" + path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + path("apiserver-kubelet-client.key"),
		"--enable-aggregator-routing=true",
	}, nil
}

// apiServerKubeletUser is the API server's user name towards the kubelet,
// as kubeadm names it.
const apiServerKubeletUser = "kube-apiserver-kubelet-client"

// kubeletCerts issues the kubelet's serving and client certificates into
// the node's dir (kubelet-serving.crt, kubelet-client.key...).
func (n *Node) kubeletCerts() error {
	c := n.nodes.c
	ips := []net.IP{net.ParseIP(n.IP()), net.IPv4(127, 0, 0, 1)}
	if err := c.IssueCert(n.name+"/kubelet-serving", n.name, nil, ips, []string{n.name}, x509.ExtKeyUsageServerAuth); err != nil {
		return err
	}
	return c.IssueCert(n.name+"/kubelet-client", "system:node:"+n.name, []string{"system:nodes"}, nil, nil, x509.ExtKeyUsageClientAuth)
}
