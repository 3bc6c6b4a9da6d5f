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
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
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
	// istio-aux's configuration and its real webhook; the chaos tests run
	// their own split pipeline, so the all-in-one bridge goes at once.
	stack, err := mesh.Start(ctx, mesh.Options{IstioAux: true, Log: logOut})
	if err == nil {
		err = stack.Aux.StopBridge()
	}
	if stack != nil {
		defer func() {
			if err := stack.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping:", err)
			}
		}()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane, kwok, istiod and istio-aux:", err)
		return 1
	}
	env, aux = stack.Cluster, stack.Aux
	fmt.Fprintf(os.Stderr, "cluster and webhook up in %s (kubeconfig %s)\n", time.Since(start).Round(time.Millisecond), env.Kubeconfig())
	return m.Run()
}
