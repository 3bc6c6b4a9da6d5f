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
	"io"
	"os"
	"testing"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
)

var (
	env    *cluster.Cluster
	aux    *istioaux.IstioAux // the webhook; its all-in-one bridge is stopped
	logOut io.Writer          = io.Discard
)

func TestMain(m *testing.M) {
	// istio-aux's configuration and its real webhook; the chaos tests run
	// their own split pipeline, so the all-in-one bridge goes at once.
	os.Exit(mesh.Main(m, "istio-aux-chaos.log", "CHAOS_VERBOSE", mesh.Options{IstioAux: true}, func(s *mesh.Mesh, log io.Writer) error {
		env, aux, logOut = s.Cluster, s.Aux, log
		return s.Aux.StopBridge()
	}))
}
