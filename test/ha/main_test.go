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
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/realnode"
)

func TestMain(m *testing.M) {
	os.Exit(realnode.RunInNetns(func() int {
		code := m.Run()
		stopShared()
		return code
	}))
}

// nodes is how many real nodes the suite's cluster has.
const nodes = 3

// One cluster serves every test of the package, in order: starting three
// nodes takes half a minute, and the faults are run one after another, not
// side by side, so that each one's figures are its own.
var shared struct {
	once     sync.Once
	m        *mesh.Mesh
	err      error
	log      io.Writer
	closeLog func()
}

// threeNodes returns the shared cluster, starting it on first use. It
// skips the test where the machine cannot host nodes (fails it with
// CI=true).
func threeNodes(t *testing.T) *mesh.Mesh {
	t.Helper()
	realnode.RequireNode(t)
	shared.once.Do(func() {
		shared.log, shared.closeLog = cluster.ProcessLog("istio-aux-ha.log", "HA_VERBOSE")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		shared.m, shared.err = mesh.Start(ctx, mesh.Options{Node: true, Nodes: nodes, Log: shared.log})
		fmt.Fprintf(os.Stderr, "%d real nodes, images and istiod up in %s\n", nodes, time.Since(start).Round(time.Millisecond))
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.m
}

func stopShared() {
	if shared.m != nil {
		if err := shared.m.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the three-node cluster:", err)
		}
	}
	if shared.closeLog != nil {
		shared.closeLog()
	}
}
