//go:build e2e

package node

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
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

// TestV131: Kubernetes 1.31 (OpenShift 4.18's) with istiod's default,
// classic there.
func TestV131(t *testing.T) { runCore(t, mesh.V131) }

// TestV132Istio124: Kubernetes 1.32 with Istio 1.24, classic by default.
func TestV132Istio124(t *testing.T) { runCore(t, mesh.V132Istio124) }

// cniOwners are the owners a mesh with Istio CNI must carry besides the
// core's TFJob and CronJob: each runs pods whose traffic the plugin
// captures, workers reaching each other through their proxies.
var cniOwners = []struct {
	name string
	run  func(*testing.T)
}{
	{"PyTorchJob", TestOwnerPyTorchJob},
	{"TrainJob", TestOwnerTrainJob},
}

// TestCNI: the newest Kubernetes with Istio's CNI node agent on the node,
// as managed and hardened meshes run it: the core scenarios and the owners
// with every pod's traffic captured, istio-validation instead of
// istio-init.
func TestCNI(t *testing.T) {
	runCore(t, mesh.CNI)
	t.Run("TrafficCaptured", cniTrafficCaptured)
	for _, sc := range cniOwners {
		t.Run(sc.name, sc.run)
	}
}

// TestV132Istio128CNI: TestCNI on the oldest Kubernetes with Istio 1.28.
func TestV132Istio128CNI(t *testing.T) {
	runCore(t, mesh.V132Istio128CNI)
	t.Run("TrafficCaptured", cniTrafficCaptured)
	for _, sc := range cniOwners {
		t.Run(sc.name, sc.run)
	}
}

// TestV133: Kubernetes 1.33 with Istio 1.26, classic by default (auto, from
// Istio 1.27, would make every sidecar native on a kubelet of 1.33).
func TestV133(t *testing.T) { runCore(t, mesh.V133) }

// TestV133Istio127: Kubernetes 1.33 with Istio 1.27 (OpenShift Service
// Mesh 3.2's) and its default, auto, on a cluster whose every kubelet is
// 1.33: Istio makes every sidecar native, which the kubelet starts before
// the apps and stops after them, whatever the pod's restart policy.
// istio-aux stays out of the way: its hold is asked for but ignored by
// Istio's template, it quits nothing, and every Job completes.
func TestV133Istio127(t *testing.T) {
	shared.Use(t, mesh.V133Istio127)
	t.Logf("cluster: %s", mesh.ShapeOf(mesh.V133Istio127))
	c, _ := meshCluster(t)
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	for _, policy := range []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure} {
		name := strings.ToLower(string(policy))
		mesh.CreateJob(t, c, ns, meshJob(name, 1, policy, worker(nil)))
	}
	for _, policy := range []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure} {
		p := checkNativeLeftAlone(t, c, ns, strings.ToLower(string(policy)))
		if p.Annotations[keys.AnnotationProxyConfig] == "" {
			t.Errorf("%s: the webhook did not ask for the hold: %v", p.Name, p.Annotations)
		}
	}
}
