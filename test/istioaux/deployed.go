package istioaux

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/test/cluster"
)

// Shape is how StartBridgeAs runs the bridge.
type Shape int

const (
	// AllInOne is the local default (`make run`, the e2e tests): one
	// bridge process with an embedded nats-server and the proxy-quit
	// function in-process.
	AllInOne Shape = iota
	// Deployed is how config/500-bridge.yaml runs it: NATS_URL names a
	// nats-server of its own and K_SINK the proxy-quit function, here a
	// process of its own on loopback.
	Deployed
)

// startDeployedPeers starts the nats-server (JetStream on) and the
// proxy-quit function of the deployed shape, unless they already run.
func (a *IstioAux) startDeployedPeers() error {
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return err
	}
	if a.nats == nil {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		a.natsURL = "nats://" + addr
		a.nats, err = a.startPeer("nats", "github.com/nats-io/nats-server/v2", "nats-server", nil, func(ctx context.Context) error {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err == nil {
				c.Close()
			}
			return err
		}, "-a", "127.0.0.1", "-p", strconv.Itoa(ports[0]), "-js", "-sd", filepath.Join(a.env.Dir(), "nats-data"))
		if err != nil {
			return err
		}
	}
	if a.function == nil {
		a.functionURL = "http://127.0.0.1:" + strconv.Itoa(ports[1])
		a.function, err = a.startPeer("function", "./functions/proxyquit/cmd/proxyquit", "proxyquit",
			[]string{"KUBECONFIG=" + a.env.Kubeconfig(), "PORT=" + strconv.Itoa(ports[1])},
			func(ctx context.Context) error { return cluster.GetOK(ctx, a.functionURL+"/healthz") })
	}
	return err
}

// startPeer builds pkg as bin, runs it as process name and waits until
// ready holds; the process is returned even when it never gets ready, for
// Stop.
func (a *IstioAux) startPeer(name, pkg, bin string, env []string, ready func(context.Context) error, args ...string) (*cluster.Process, error) {
	path, err := Build(pkg, bin)
	if err != nil {
		return nil, err
	}
	p, err := cluster.StartProcess(name, a.log, env, path, args...)
	if err != nil {
		return nil, err
	}
	return p, p.WaitUp(context.Background(), 30*time.Second, ready)
}

// CallerToken is what the bridge's projected token volume holds in a real
// install (config/500-bridge.yaml): a token of ServiceAccount
// istio-aux-bridge made for the function's audience, written to a file in
// dir. The deployed shape's bridge presents it to the function.
func CallerToken(ctx context.Context, cs kubernetes.Interface, dir string) (string, error) {
	return Token(ctx, cs, SystemNamespace, "istio-aux-bridge", proxyquit.DefaultAudience, dir)
}

// Token creates ServiceAccount namespace/name if needed and writes a token
// of it for audience to a file in dir, whose path it returns.
func Token(ctx context.Context, cs kubernetes.Interface, namespace, name, audience, dir string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	safe := strings.Map(func(r rune) rune {
		if r == '-' || r == '.' || unicode.IsLetter(r) || unicode.IsDigit(r) {
			return r
		}
		return '_'
	}, audience)
	file := filepath.Join(dir, namespace+"-"+name+"-"+safe+".token")
	return file, os.WriteFile(file, []byte(tr.Status.Token), 0o600)
}
