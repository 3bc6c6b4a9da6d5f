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

	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/test/cluster"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
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
	if a.nats == nil {
		bin, err := Build("github.com/nats-io/nats-server/v2", "nats-server")
		if err != nil {
			return err
		}
		port, err := cluster.FreePort()
		if err != nil {
			return err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		a.nats, err = cluster.StartProcess("nats", a.log, nil, bin,
			"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(a.env.Dir(), "nats-data"))
		if err != nil {
			return err
		}
		a.natsURL = "nats://" + addr
		if err := a.nats.WaitUp(context.Background(), 30*time.Second, func(ctx context.Context) error {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err == nil {
				c.Close()
			}
			return err
		}); err != nil {
			return err
		}
	}
	if a.function == nil {
		bin, err := Build("./functions/proxyquit/cmd/proxyquit", "proxyquit")
		if err != nil {
			return err
		}
		port, err := cluster.FreePort()
		if err != nil {
			return err
		}
		a.functionURL = "http://127.0.0.1:" + strconv.Itoa(port)
		a.function, err = cluster.StartProcess("function", a.log,
			[]string{"KUBECONFIG=" + a.env.Kubeconfig(), "PORT=" + strconv.Itoa(port)}, bin)
		if err != nil {
			return err
		}
		if err := a.function.WaitUp(context.Background(), 30*time.Second, func(ctx context.Context) error {
			return cluster.GetOK(ctx, a.functionURL+"/healthz")
		}); err != nil {
			return err
		}
	}
	return nil
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
