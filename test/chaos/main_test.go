//go:build chaos

// Package chaos proves istio-aux loses nothing under faults, on the local
// control plane (test/cluster: kube-apiserver, the Job controller, kwok) with
// Istio's real injector, istiod out of cluster (test/istio, classic
// sidecars). istio-aux runs split into separate
// processes — nats-server, the bridge (ISTIO_AUX_ROLE=bridge), a dispatcher
// (ISTIO_AUX_ROLE=dispatch, K_SINK) and the proxy-quit function over HTTP —
// so that each can be SIGKILLed and restarted while Jobs run. hack/chaos.sh
// (make chaos) builds everything first.
package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/istioaux"
)

var (
	env    *cluster.Cluster
	aux    *istioaux.IstioAux // the webhook; its all-in-one bridge is stopped
	logOut io.Writer          = io.Discard
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var closeLog func()
	logOut, closeLog = cluster.ProcessLog("istio-aux-chaos.log", "CHAOS_VERBOSE")
	defer closeLog()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{ControllerManager: true, Kwok: true, Log: logOut})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting cluster:", err)
		return 1
	}
	env = c
	defer func() {
		if aux != nil {
			_ = aux.Stop()
		}
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping cluster:", err)
		}
	}()
	istiod, err := istio.Start(ctx, c, istio.Options{NativeSidecars: "false", Log: logOut})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting istiod:", err)
		return 1
	}
	defer func() {
		if err := istiod.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping istiod:", err)
		}
	}()
	// istioaux.Start installs istio-aux's configuration and runs the real
	// webhook, then an all-in-one bridge; the chaos tests run their own
	// split pipeline instead, so that bridge goes at once.
	a, err := istioaux.Start(ctx, c, logOut)
	aux = a
	if err == nil {
		err = a.StopBridge()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting istio-aux:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "cluster and webhook up in %s (kubeconfig %s)\n", time.Since(start).Round(time.Millisecond), c.Kubeconfig())
	return m.Run()
}
