//go:build e2e

package node

import (
	"testing"

	"github.com/istio-aux/istio-aux/test/mesh"
)

// The core scenarios on the Kubernetes versions users run besides the
// newest (the README's compatibility matrix): each TestV… makes the run's
// cluster that version (mesh.Shared.Use) and runs, as its subtests, the
// very tests the newest's run has at the top level, so that each scenario
// is written once. A run serves one version: make e2e runs each of these
// with -run '^TestV132$' on its own (hack/e2e-node.sh).

// core are the scenarios every version must pass: istio-aux installed
// from its release (its pods deleted while Jobs run), the seed's TFJob
// story, an OnFailure Job that fails once, a CronJob, mode native (a
// native sidecar on request, which every version from 1.29 runs), the exec
// policy refusing a quit outside the opt-in, and kubectl istio-aux explain
// and check. The ones that change what every pod sees come first: Go runs
// a test's parallel subtests after its other ones.
var core = []struct {
	name string
	run  func(*testing.T)
}{
	{"InstallConfig", TestNodeInstallConfig},
	{"ModeNative", TestNodeModeNative},
	{"ExecPolicyRefusesOutsideTheOptIn", TestNodeExplainQuitDenied},
	{"Check", TestNodeCheck},
	{"SeedTFJob", TestOwnerTFJobSeedStory},
	{"OnFailureRetryKeepsProxy", TestNodeOnFailureRetryKeepsProxy},
	{"CronJob", TestOwnerCronJob},
	{"Explain", TestNodeExplain},
}

// runCore runs the core scenarios on a cluster of shape o.
func runCore(t *testing.T, o mesh.Options) {
	shared.Use(t, o)
	t.Logf("cluster: %s", mesh.ShapeOf(o))
	for _, sc := range core {
		t.Run(sc.name, sc.run)
	}
}

// TestV132: Kubernetes 1.32 with istiod's default, auto, which keeps every
// sidecar classic on a kubelet older than 1.33.
func TestV132(t *testing.T) { runCore(t, mesh.V132) }

// TestV132Istio124: Kubernetes 1.32 with Istio 1.24, classic by default.
func TestV132Istio124(t *testing.T) { runCore(t, mesh.V132Istio124) }

// TestV133: Kubernetes 1.33 with Istio 1.26, classic by default (auto, from
// Istio 1.27, would make every sidecar native on a kubelet of 1.33).
func TestV133(t *testing.T) { runCore(t, mesh.V133) }
