//go:build e2e

// Package ha tests istio-aux on a whole cluster of three real nodes
// (test/realnode: each node a machine of its own on the cluster's LAN)
// under the faults a cluster of many nodes lives with: a node powered off,
// a node partitioned and healed, kube-apiserver and etcd killed, a rolling
// upgrade. istio-aux is installed as users install it, with its highly
// available shape: two bridges on a Lease, NATS as three servers, the
// webhook on two nodes.
//
// hack/e2e-ha.sh runs it (make e2e calls it). Without root or the nodes'
// packages the tests skip, saying why; with CI=true they fail.
package ha

import (
	"os"
	"testing"

	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
)

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// nodes is how many real nodes the suite's cluster has.
const nodes = 3

// One cluster serves every test of the package, in order: starting three
// nodes takes half a minute, and the faults are run one after another, not
// side by side, so that each one's figures are its own. Knative Serving is
// not installed (docs/bench.md: its components and three kubelets do not
// fit two cores); the function runs as the Deployment Knative would make of
// it.
var shared = &mesh.Shared{Options: mesh.Options{Nodes: nodes}, LogName: "istio-aux-ha.log", Verbose: "HA_VERBOSE"}

// threeNodes returns the shared cluster, starting it on first use.
func threeNodes(t *testing.T) *mesh.Mesh { return shared.Mesh(t) }

// installedAs is the three-node cluster with istio-aux installed from dir
// (istioaux.Config or istioaux.Standalone) as users install it.
func installedAs(t *testing.T, dir string) (*mesh.Mesh, *istioaux.Installed) {
	return shared.Installed(t, dir)
}
