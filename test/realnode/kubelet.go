package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// kubeletConfig is the kubelet's configuration file. What each setting
// avoids on this kind of machine:
//   - failCgroupV1 false: since 1.35 the kubelet refuses cgroup v1 by default;
//   - cgroupDriver cgroupfs: no systemd; cgroupRoot puts the pods under the
//     run's cgroup, where the cleanup finds them;
//   - failSwapOn false, oomScoreAdj 0, maxOpenFiles within the hard limit:
//     no CAP_SYS_RESOURCE to raise limits or lower its own OOM score;
//   - image GC off (100%) and only a memory eviction threshold: a full disk
//     must not delete the imported images (they cannot be pulled back) or
//     evict test pods;
//   - resolvConf: the machine's resolver is an address pods must never
//     reach; pods with dnsPolicy Default get 127.0.0.1 (their own loopback),
//     the others the cluster DNS (clusterDNS);
//   - podLogsDir, volumePluginDir: inside the cluster dir, not /var/log/pods
//     and /usr/libexec/kubernetes;
//   - x509 client certificates only, and Webhook authorization: the API
//     server gets in for exec and logs with its client certificate.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {{cgroup}}
failSwapOn: false
oomScoreAdj: 0
maxOpenFiles: 10000
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
mergeDefaultEvictionSettings: false
containerRuntimeEndpoint: unix://{{socket}}
address: {{nodeIP}}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: {{dir}}/kubelet-serving.crt
tlsPrivateKeyFile: {{dir}}/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: {{ca}}}
authorization:
  mode: Webhook
podLogsDir: {{dir}}/pod-logs
resolvConf: {{dir}}/resolv.conf
clusterDNS: [{{dnsIP}}]
clusterDomain: {{domain}}
volumePluginDir: {{dir}}/volume-plugins
registerNode: true
`

// kubeletConfigFor fills kubeletConfig in: the cgroup root, containerd's
// socket, the node's address and dir (its certificates, logs,
// resolv.conf), and the cluster CA's certificate.
func kubeletConfigFor(cgroup, socket, nodeIP, dir, ca string) string {
	return strings.NewReplacer("{{cgroup}}", cgroup, "{{socket}}", socket, "{{nodeIP}}", nodeIP, "{{dir}}", dir, "{{ca}}", ca,
		"{{dnsIP}}", DNSServiceIP, "{{domain}}", cluster.ClusterDomain).Replace(kubeletConfig)
}

// startKubelet starts the kubelet against containerd and waits until its
// node is Ready.
func (n *Node) startKubelet(ctx context.Context) error {
	if err := n.kubeletCerts(); err != nil {
		return err
	}
	files := map[string]string{
		"resolv.conf":  "nameserver 127.0.0.1\n",
		"kubelet.yaml": kubeletConfigFor(n.cgroup(), n.socket, n.IP(), n.dir(), filepath.Join(n.nodes.dir, "ca.crt")),
	}
	for name, data := range files {
		if err := os.WriteFile(n.path(name), []byte(data), 0o600); err != nil {
			return err
		}
	}
	kubeconfig, err := n.nodes.c.WriteKubeconfig(n.name+"-kubelet", lanAPIServer, "kubelet-client", &clientcmdapi.AuthInfo{
		ClientCertificate: n.path("kubelet-client.crt"), ClientKey: n.path("kubelet-client.key")})
	if err != nil {
		return err
	}
	args := []string{
		"--config=" + n.path("kubelet.yaml"),
		"--kubeconfig=" + kubeconfig,
		// Neither is in the configuration file; both default to /var/lib/kubelet.
		"--root-dir=" + n.path("kubelet"),
		"--cert-dir=" + n.path("kubelet-pki"),
		"--hostname-override=" + n.name,
		"--node-ip=" + n.IP(),
		"--v=1",
	}
	// The kubelet exits when containerd's CRI is not serving yet, which
	// after a power-off takes a moment longer than containerd's own API (it
	// recovers the sandboxes it knew): as systemd restarts it on a machine,
	// it is started again, a second later.
	for attempt := 1; ; attempt++ {
		p, err := n.start("kubelet", n.bin("kubelet"), args...)
		if err != nil {
			return err
		}
		err = p.WaitUp(ctx, 60*time.Second, func(ctx context.Context) error {
			return n.nodes.c.NodeReady(ctx, n.name)
		})
		if exited, _ := p.Exited(); err == nil || !exited || attempt == kubeletStarts {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second): // systemd's RestartSec, not a wait for anything
		}
	}
}

// kubeletStarts bounds the kubelet's restarts at a node's boot.
const kubeletStarts = 20

// lanAPIServer is kube-apiserver as the nodes reach it, on the LAN.
var lanAPIServer = "https://" + net.JoinHostPort(ControlPlaneIP, strconv.Itoa(cluster.APIServerPort))

// nodeRBAC lets kubelets (group system:nodes) do a node's work, as the Node
// authorizer would, and lets the API server use the kubelet's API.
func (ns *Nodes) nodeRBAC(ctx context.Context) error {
	bindings := []*rbacv1.ClusterRoleBinding{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-test:nodes"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-test:apiserver-kubelet"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: apiServerKubeletUser}},
		},
	}
	for _, b := range bindings {
		_, err := ns.c.Client().RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ClusterRoleBinding %s: %w", b.Name, err)
		}
	}
	return nil
}
