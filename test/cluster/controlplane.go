package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func (c *Cluster) path(name string) string { return filepath.Join(c.dir, name) }

func (c *Cluster) startEtcd(ctx context.Context) (string, error) {
	client, err := freeAddr()
	if err != nil {
		return "", err
	}
	peer, err := freeAddr()
	if err != nil {
		return "", err
	}
	url := "http://" + client
	p, err := c.start("etcd", nil, filepath.Join(c.binDir, "etcd"),
		"--name=default",
		"--data-dir="+c.path("etcd"),
		"--listen-client-urls="+url, "--advertise-client-urls="+url,
		"--listen-peer-urls=http://"+peer, "--initial-advertise-peer-urls=http://"+peer,
		"--initial-cluster=default=http://"+peer,
		// A test cluster lives for minutes: durability buys nothing and
		// fsync on a shared 2-core machine costs seconds.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return "", err
	}
	err = waitUp(ctx, p, 30*time.Second, func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, url+"/health")
	})
	return url, err
}

func (c *Cluster) startAPIServer(ctx context.Context, etcdURL string) error {
	ca, err := NewCA("istio-aux-test-ca")
	if err != nil {
		return err
	}
	c.ca = ca
	cert, key, err := ca.Serving("kubernetes", "kubernetes.default", "kubernetes.default.svc")
	if err != nil {
		return err
	}
	saKey, saPub, err := serviceAccountKey()
	if err != nil {
		return err
	}
	admin, kcm := token(), token()
	tokens := fmt.Sprintf("%s,admin,admin,system:masters\n%s,system:kube-controller-manager,kcm,system:masters\n", admin, kcm)
	files := map[string][]byte{
		"ca.crt": ca.CertPEM, "apiserver.crt": cert, "apiserver.key": key,
		"sa.key": saKey, "sa.pub": saPub, "tokens.csv": []byte(tokens),
	}
	for name, data := range files {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			return err
		}
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	if err := c.addAPIServerNodeArgs(); err != nil {
		return err
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	p, err := c.start("kube-apiserver", nil, filepath.Join(c.binDir, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file="+c.path("apiserver.crt"), "--tls-private-key-file="+c.path("apiserver.key"),
		"--token-auth-file="+c.path("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+c.path("sa.pub"),
		"--service-account-signing-key-file="+c.path("sa.key"),
		// No service-account controller runs unless kcm does; pods must not
		// depend on one existing.
		"--disable-admission-plugins=ServiceAccount",
		// There is no kube-proxy and no second apiserver to reconcile.
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--kubelet-preferred-address-types=InternalIP",
		// kwok's and the kubelet's serving certificates come from our CA.
		"--kubelet-certificate-authority="+c.path("ca.crt"),
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir="+c.path("apiserver-certs"),
	)
	if err != nil {
		return err
	}
	if c.kubeconfig, err = c.writeKubeconfig("admin", server, "admin", &clientcmdapi.AuthInfo{Token: admin}); err != nil {
		return err
	}
	if _, err = c.writeKubeconfig("kcm", server, "kcm", &clientcmdapi.AuthInfo{Token: kcm}); err != nil {
		return err
	}
	if c.rest, err = loadKubeconfig(c.kubeconfig); err != nil {
		return err
	}
	c.rest.QPS, c.rest.Burst = 100, 200
	if c.client, err = kubernetes.NewForConfig(c.rest); err != nil {
		return err
	}
	return waitUp(ctx, p, 60*time.Second, func(ctx context.Context) error {
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("readyz: %w: %s", err, body)
		}
		return nil
	})
}

func (c *Cluster) startControllerManager(ctx context.Context) error {
	p, err := c.start("kube-controller-manager", nil, filepath.Join(c.binDir, "kube-controller-manager"),
		"--kubeconfig="+c.path("kcm.kubeconfig"),
		"--authentication-kubeconfig="+c.path("kcm.kubeconfig"),
		"--authorization-kubeconfig="+c.path("kcm.kubeconfig"),
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
		// Only what Jobs and namespaces need: less CPU on a shared machine.
		"--controllers=job-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,ttl-after-finished-controller,pod-garbage-collector-controller",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+c.path("sa.key"),
		"--root-ca-file="+c.path("ca.crt"),
	)
	if err != nil {
		return err
	}
	// kcm has no port here; it is up once it has created the default
	// service account (the serviceaccount controller's first act).
	return waitUp(ctx, p, 60*time.Second, func(ctx context.Context) error {
		_, err := c.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1GetOptions)
		return err
	})
}

// GetOK GETs url (plain HTTP or any TLS the default client trusts) and
// fails unless the answer is 200.
func GetOK(ctx context.Context, url string) error { return httpOK(ctx, http.DefaultClient, url) }

func httpOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
