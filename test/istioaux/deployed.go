package istioaux

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"time"

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
	if a.nats == nil {
		bin, err := build("github.com/nats-io/nats-server/v2", "nats-server")
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
		bin, err := build("./functions/proxyquit/cmd/proxyquit", "proxyquit")
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
