//go:build e2e

// Package node tests the harness's real node (test/realnode, joined to
// test/cluster's control plane): containerd, runc and the kubelet v1.36 in
// a network namespace of the test binary's own, with images imported from
// this repository's test programs. It proves the kubelet behaviour that the kwok
// Stages only imitate: real logs, real exec exit codes, postStart holding
// the next container, native sidecars, OnFailure restarts and a classic
// sidecar that keeps a finished pod Running until it is quit.
//
// hack/e2e-node.sh installs what the node needs and runs it. Without root or
// the node's packages the tests skip, saying why; with CI=true they fail.
package node

import (
	"os"
	"testing"

	"github.com/istio-aux/istio-aux/test/realnode"
)

func TestMain(m *testing.M) {
	os.Exit(realnode.RunInNetns(func() int {
		code := m.Run()
		stopShared()
		return code
	}))
}
