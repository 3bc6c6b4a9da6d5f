//go:build e2e

// Package node tests istio-aux on a whole cluster of one real node
// (test/realnode: containerd, runc and the kubelet v1.36 on a machine of
// their own, joined to test/cluster's control plane), installed from its
// release as users install it: the behaviour only a kubelet shows (real
// exec exit codes, postStart holding the next container, native sidecars,
// OnFailure and container-level restarts, a classic sidecar keeping a
// finished pod Running until it is quit), the install itself, Knative
// Serving, the owners and kubectl istio-aux.
//
// hack/e2e-node.sh installs what the node needs and runs it. Without root or
// the node's packages the tests skip, saying why; with CI=true they fail.
package node

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	os.Exit(shared.Main(m))
}
