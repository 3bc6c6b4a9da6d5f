//go:build e2e

// Package e2e runs istio-aux's binaries against a real kube-apiserver, the
// real Job controller and kwok (test/cluster), with Istio's real sidecar
// injector: istiod, out of cluster (test/istio), with classic sidecars
// (ENABLE_NATIVE_SIDECARS=false) as the kwok Stages and the hold are
// about. hack/e2e.sh (make e2e) builds everything first.
package e2e

import (
	"io"
	"os"
	"testing"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
)

var (
	stack  *mesh.Mesh
	env    *cluster.Cluster
	logOut io.Writer = io.Discard
)

func TestMain(m *testing.M) {
	os.Exit(mesh.Main(m, "istio-aux-e2e.log", "E2E_VERBOSE", mesh.Options{}, func(s *mesh.Mesh, log io.Writer) error {
		stack, env, logOut = s, s.Cluster, log
		return nil
	}))
}
