//go:build e2e

// Package e2e runs istio-aux's binaries against a real kube-apiserver, the
// real Job controller and kwok (test/cluster), with Istio's real sidecar
// injector: istiod, out of cluster (test/istio), with classic sidecars
// (ENABLE_NATIVE_SIDECARS=false) as the kwok Stages and the hold are
// about. hack/e2e.sh (make e2e) builds everything first.
package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
)

var (
	stack  *mesh.Mesh
	env    *cluster.Cluster
	logOut io.Writer = io.Discard
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var closeLog func()
	logOut, closeLog = cluster.ProcessLog("istio-aux-e2e.log", "E2E_VERBOSE")
	defer closeLog()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	var err error
	if stack, err = mesh.Start(ctx, mesh.Options{Log: logOut}); err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane, kwok and istiod:", err)
		return 1
	}
	env = stack.Cluster
	defer func() {
		if err := stack.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping:", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "cluster and istiod up in %s (kubeconfig %s)\n", time.Since(start).Round(time.Millisecond), env.Kubeconfig())
	return m.Run()
}
