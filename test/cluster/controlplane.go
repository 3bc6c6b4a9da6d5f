package cluster

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/istio-aux/istio-aux/test/httpget"
)

func (c *Cluster) path(name string) string { return filepath.Join(c.dir, name) }

func (c *Cluster) startEtcd(ctx context.Context) error {
	client, err := freeAddr()
	if err != nil {
		return err
	}
	peer, err := freeAddr()
	if err != nil {
		return err
	}
	url := "http://" + client
	c.etcdURL = url
	p, err := c.StartProcess("etcd", nil, filepath.Join(K8sBinDir(), "etcd"),
		"--name=default",
		"--data-dir="+c.path("etcd"),
		"--listen-client-urls="+url, "--advertise-client-urls="+url,
		"--listen-peer-urls=http://"+peer, "--initial-advertise-peer-urls=http://"+peer,
		"--initial-cluster=default=http://"+peer,
		// A test cluster lives for minutes: durability buys nothing and
		// fsync on a shared 2-core machine costs seconds.
		"--unsafe-no-fsync",
		// make bench's largest part writes 100,000 pods twice (~1.7 GiB of
		// history before compaction), near the 2 GiB default.
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	return p.WaitUp(ctx, 30*time.Second, c.etcdReady)
}

func (c *Cluster) etcdReady(ctx context.Context) error {
	return httpget.OK(ctx, http.DefaultClient, c.etcdURL+"/health")
}

func (c *Cluster) apiServerReady(ctx context.Context) error {
	body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("readyz: %w: %s", err, body)
	}
	return nil
}

// Addresses of the cluster. With a Node, the API server listens on
// APIServerPort of every address of the node's network namespace, so that
// pods reach it on the node's IP, and through the kubernetes Service at
// KubernetesServiceIP, the first address of ServiceCIDR. Service names end
// in ClusterDomain, as does the service-account issuer.
const (
	APIServerPort       = 6443
	ServiceCIDR         = "10.96.0.0/16"
	KubernetesServiceIP = "10.96.0.1"
	ClusterDomain       = "cluster.local"
)

// identities are the users the control plane's components authenticate
// as, each with a token: a whole cluster gives them the names its bootstrap
// RBAC roles are bound to, as kubeadm does; the kwok harness's controller
// manager runs as a member of system:masters.
type identity struct{ name, user, group string }

func (c *Cluster) identities() []identity {
	ids := []identity{{"admin", "admin", "system:masters"}}
	if c.opts.Node == nil {
		return append(ids, identity{"kcm", "system:kube-controller-manager", "system:masters"})
	}
	return append(ids,
		identity{"kcm", "system:kube-controller-manager", ""},
		identity{"scheduler", "system:kube-scheduler", ""},
		identity{"kube-proxy", "system:kube-proxy", ""},
	)
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	ca, err := NewCA("istio-aux-test-ca")
	if err != nil {
		return err
	}
	c.ca = ca
	saKey, saPub, err := serviceAccountKey()
	if err != nil {
		return err
	}
	var tokens strings.Builder
	secrets := map[string]string{}
	for _, id := range c.identities() {
		secrets[id.name] = token()
		// token,user,uid[,"groups"] (kube-apiserver's --token-auth-file)
		fmt.Fprintf(&tokens, "%s,%s,%s", secrets[id.name], id.user, id.name)
		if id.group != "" {
			fmt.Fprintf(&tokens, ",%q", id.group)
		}
		tokens.WriteString("\n")
	}
	caKey, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt": ca.CertPEM, "ca.key": pemBlock("EC PRIVATE KEY", caKey),
		"sa.key": saKey, "sa.pub": saPub, "tokens.csv": []byte(tokens.String()),
	}
	for name, data := range files {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			return err
		}
	}
	// The serving certificate covers every name and address a client may
	// use: the harness on loopback, pods on the node IP or the kubernetes
	// Service.
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain}
	if c.opts.Node != nil {
		ips = append(ips, net.ParseIP(c.opts.Node.IP()), net.ParseIP(KubernetesServiceIP))
	}
	if err := c.IssueCert("apiserver", "kube-apiserver", nil, ips, dns, x509.ExtKeyUsageServerAuth); err != nil {
		return err
	}
	port := APIServerPort
	var nodeArgs []string
	if c.opts.Node == nil {
		if port, err = FreePort(); err != nil {
			return err
		}
	} else if nodeArgs, err = c.opts.Node.APIServerArgs(c); err != nil {
		return err
	}
	args := []string{
		"--etcd-servers=" + c.etcdURL,
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + c.path("apiserver.crt"), "--tls-private-key-file=" + c.path("apiserver.key"),
		"--token-auth-file=" + c.path("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc." + ClusterDomain,
		"--service-account-key-file=" + c.path("sa.pub"),
		"--service-account-signing-key-file=" + c.path("sa.key"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--kubelet-preferred-address-types=InternalIP",
		// kwok's and the kubelet's serving certificates come from our CA.
		"--kubelet-certificate-authority=" + c.path("ca.crt"),
		"--allow-privileged=true",
		fmt.Sprintf("--profiling=%t", c.opts.Profiling),
		"--cert-dir=" + c.path("apiserver-certs"),
	}
	if c.opts.Node != nil {
		// A whole cluster, inside the node's network namespace: every
		// address of it (loopback and the node IP, nothing else exists
		// there), the default admission plugins, and the kubernetes
		// Service's endpoints kept on the node IP by the lease reconciler.
		args = append(args, "--bind-address=0.0.0.0", "--advertise-address="+c.opts.Node.IP())
	} else {
		args = append(args, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
			// No service-account controller runs unless kcm does; pods must
			// not depend on one existing.
			"--disable-admission-plugins=ServiceAccount",
			// There is no kube-proxy and no second apiserver to reconcile.
			"--endpoint-reconciler-type=none")
	}
	args = append(args, c.opts.APIServerArgs...)
	p, err := c.StartProcess("kube-apiserver", nil, filepath.Join(c.binDir, "kube-apiserver"), append(args, nodeArgs...)...)
	if err != nil {
		return err
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	for _, id := range c.identities() {
		path, err := c.WriteKubeconfig(id.name, server, id.name, &clientcmdapi.AuthInfo{Token: secrets[id.name]})
		if err != nil {
			return err
		}
		if id.name == "admin" {
			c.kubeconfig = path
		}
	}
	if c.rest, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig); err != nil {
		return err
	}
	c.rest.QPS, c.rest.Burst = 100, 200
	if c.client, err = kubernetes.NewForConfig(c.rest); err != nil {
		return err
	}
	return p.WaitUp(ctx, 60*time.Second, c.apiServerReady)
}

func (c *Cluster) startControllerManager(ctx context.Context) error {
	args := []string{
		"--kubeconfig=" + c.path("kcm.kubeconfig"),
		"--authentication-kubeconfig=" + c.path("kcm.kubeconfig"),
		"--authorization-kubeconfig=" + c.path("kcm.kubeconfig"),
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--service-account-private-key-file=" + c.path("sa.key"),
		"--root-ca-file=" + c.path("ca.crt"),
	}
	if c.opts.Node != nil {
		// Every default controller (CronJob, Deployment, ReplicaSet,
		// StatefulSet, EndpointSlice, the token and root-CA publishers…),
		// each under its own ServiceAccount, as kubeadm runs them; CSRs
		// signed by the cluster CA.
		args = append(args,
			"--use-service-account-credentials=true",
			"--service-cluster-ip-range="+ServiceCIDR,
			"--cluster-signing-cert-file="+c.path("ca.crt"),
			"--cluster-signing-key-file="+c.path("ca.key"),
		)
	} else {
		args = append(args,
			// Only what Jobs and namespaces need: less CPU on a shared machine.
			"--controllers=job-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,ttl-after-finished-controller,pod-garbage-collector-controller",
			"--use-service-account-credentials=false",
		)
	}
	p, err := c.StartProcess("kube-controller-manager", nil, filepath.Join(c.binDir, "kube-controller-manager"), args...)
	if err != nil {
		return err
	}
	// kcm has no port here; it is up once it has created the default
	// service account (the serviceaccount controller's first act).
	return p.WaitUp(ctx, 60*time.Second, func(ctx context.Context) error {
		_, err := c.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// startScheduler runs kube-scheduler (a whole cluster: the harness binds no
// pods). It serves nothing; it shows it works by scheduling the cluster
// DNS, the first pod.
func (c *Cluster) startScheduler(context.Context) error {
	_, err := c.StartProcess("kube-scheduler", nil, filepath.Join(c.binDir, "kube-scheduler"),
		"--kubeconfig="+c.path("scheduler.kubeconfig"),
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
	)
	return err
}

// GetOK GETs url (plain HTTP or any TLS the default client trusts) and
// fails unless the answer is 200.
func GetOK(ctx context.Context, url string) error { return httpget.OK(ctx, http.DefaultClient, url) }

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
