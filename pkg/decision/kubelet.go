package decision

import (
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/istio-aux/istio-aux/pkg/slim"
)

// Kubelet is the kubelet of a pod's node, by its minor version: what it
// does with an app that exited depends on the restart features that
// version runs with its default feature gates, and an API server may hand
// a pod that uses a newer one to an older kubelet, which ignores the
// fields it does not know (Kubernetes' skew policy lets a kubelet be three
// minors older than its API server). The zero value is the newest kubelet
// this package knows.
//
// Checked against each kubelet's own ShouldContainerBeRestarted
// (hack/tools/k8s/kubeletparity, one column of
// testdata/kubelet-restart.json per version):
//   - up to 1.34, only the pod's restartPolicy decides: 1.32 and 1.33 have
//     no container-level policy for regular containers, and 1.34 has it
//     behind ContainerRestartRules, alpha and off;
//   - 1.35 reads a regular container's own restartPolicy and its
//     restartPolicyRules (ContainerRestartRules, beta and on), but a rule
//     whose action is RestartAllContainers does nothing there
//     (RestartAllContainersOnContainerExits, alpha and off): the container's
//     policy decides;
//   - 1.36 and newer act on every rule.
type Kubelet struct {
	// Minor is the kubelet's minor version (1.Minor); 0 is unknown, taken
	// as the newest.
	Minor int
}

// Minor versions at which the kubelet's restart features are on by default.
const (
	minorRestartRules = 35
	minorRestartAll   = 36
)

// KubeletOf is the kubelet that reports version (a Node's
// status.nodeInfo.kubeletVersion: "v1.33.13", "v1.32.9-eks-1234abc"). A
// version that cannot be read is taken as the newest kubelet, which is what
// istio-aux decided for every pod before it read versions.
func KubeletOf(v string) Kubelet {
	parsed, err := version.ParseGeneric(v)
	if err != nil || parsed.Major() != 1 {
		return Kubelet{}
	}
	return Kubelet{Minor: int(parsed.Minor())}
}

// restartRules reports whether the kubelet reads a regular container's own
// restartPolicy and restartPolicyRules.
func (k Kubelet) restartRules() bool { return k.Minor == 0 || k.Minor >= minorRestartRules }

// restartAll reports whether the kubelet acts on a RestartAllContainers
// rule.
func (k Kubelet) restartAll() bool { return k.Minor == 0 || k.Minor >= minorRestartAll }

// KubeletMatters reports whether the kubelet's version can change Decide's
// answer for p: only an app with a restart policy of its own is read
// differently by different kubelets. Callers that do not know the pod's
// node need its kubelet only then (the function reads the Node then, and
// only then).
func KubeletMatters(p *slim.Pod) bool {
	for _, c := range p.Spec.Containers {
		if c.RestartPolicy != nil {
			return true
		}
	}
	return false
}

// Kubelets are one kubelet of each behaviour this package tells apart,
// newest first: DecideForAny asks each.
var Kubelets = []Kubelet{{}, {Minor: minorRestartRules}, {Minor: minorRestartRules - 1}}
