//go:build tools

// Package tools pins the Istio commands that hack/build-istio.sh builds:
// pilot-agent (the proxy's agent, run for real by the harness),
// pilot-discovery (istiod, run out of cluster as the sidecar injector), and
// Istio CNI's node agent (install-cni) and plugin (istio-cni). It is
// a module of its own because istio.io/istio moves k8s.io and grpc to
// versions neither istio-aux nor hack/tools/k8s builds with.
package tools

import (
	_ "istio.io/istio/cni/cmd/install-cni"
	_ "istio.io/istio/cni/cmd/istio-cni"
	_ "istio.io/istio/pilot/cmd/pilot-agent"
	_ "istio.io/istio/pilot/cmd/pilot-discovery"
)
