package decision

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/slim"
)

// Restart is what the kubelet does with a container that has terminated.
type Restart int

const (
	// NoRestart: the container stays terminated.
	NoRestart Restart = iota
	// RestartContainer: the kubelet runs the container again.
	RestartContainer
	// RestartAll: a rule restarts every container of the pod, in place.
	RestartAll
)

// WillRestart is kubelet k's ShouldContainerBeRestarted (k8s.io/kubernetes
// pkg/kubelet/container/helpers.go; from 1.35 its ContainerShouldRestart,
// pkg/api/v1/pod/util.go) for a regular container that exited with
// exitCode under the pod's restart policy. Where k reads them (Kubelet),
// restart rules are only read when the container has its own restart
// policy (the API server requires one with rules); the first rule that
// matches decides; a rule matches on an exit code In or NotIn its values,
// and an unknown operator or action does not match (the kubelet skips it
// and falls back), nor does RestartAllContainers on a kubelet that lacks
// it. Then the container's own policy decides, then the pod's: Always
// restarts, OnFailure restarts a non-zero exit, Never does not, and an
// unknown or empty pod policy is the API default, Always.
func WillRestart(c slim.Container, pod corev1.RestartPolicy, exitCode int32, k Kubelet) Restart {
	r, _ := WhyRestart(c, pod, exitCode, k)
	return r
}

// RestartSource is which of the kubelet's settings decided a restart.
type RestartSource int

// Restart sources, in the order the kubelet reads them.
const (
	// FromRule: one of the container's restartPolicyRules.
	FromRule RestartSource = iota + 1
	// FromContainer: the container's own restartPolicy.
	FromContainer
	// FromPod: the pod's restartPolicy (or its API default, Always).
	FromPod
)

// RestartCause says what decided WillRestart's answer: the setting, the
// index of the rule when it was a rule, and the policy that applied
// (the rule's action for a rule).
type RestartCause struct {
	Source RestartSource
	Rule   int
	Policy string
}

// WhyRestart is WillRestart with what decided it, for those who must
// explain the answer (kubectl istio-aux explain). WillRestart is built on
// it, so the two never disagree.
func WhyRestart(c slim.Container, pod corev1.RestartPolicy, exitCode int32, k Kubelet) (Restart, RestartCause) {
	if c.RestartPolicy != nil && k.restartRules() {
		if i, ok := matchingRuleIndex(c.RestartPolicyRules, exitCode); ok {
			cause := RestartCause{Source: FromRule, Rule: i, Policy: string(c.RestartPolicyRules[i].Action)}
			switch c.RestartPolicyRules[i].Action {
			case corev1.ContainerRestartRuleActionRestart:
				return RestartContainer, cause
			case corev1.ContainerRestartRuleActionRestartAllContainers:
				if k.restartAll() {
					return RestartAll, cause
				}
			}
		}
		cause := RestartCause{Source: FromContainer, Policy: string(*c.RestartPolicy)}
		switch *c.RestartPolicy {
		case corev1.ContainerRestartPolicyAlways:
			return RestartContainer, cause
		case corev1.ContainerRestartPolicyOnFailure:
			return restartIf(exitCode != 0), cause
		case corev1.ContainerRestartPolicyNever:
			return NoRestart, cause
		}
	}
	cause := RestartCause{Source: FromPod, Policy: string(pod)}
	switch pod {
	case corev1.RestartPolicyOnFailure:
		return restartIf(exitCode != 0), cause
	case corev1.RestartPolicyNever:
		return NoRestart, cause
	}
	cause.Policy = string(corev1.RestartPolicyAlways)
	return RestartContainer, cause
}

func restartIf(b bool) Restart {
	if b {
		return RestartContainer
	}
	return NoRestart
}

// matchingRule is the first rule whose exit codes match.
func matchingRule(rules slim.Rules, exitCode int32) (slim.Rule, bool) {
	if i, ok := matchingRuleIndex(rules, exitCode); ok {
		return rules[i], true
	}
	return slim.Rule{}, false
}

// matchingRuleIndex is the index of the first rule whose exit codes match.
func matchingRuleIndex(rules slim.Rules, exitCode int32) (int, bool) {
	for i, r := range rules {
		if r.ExitCodes == nil {
			continue
		}
		in := slices.Contains(r.ExitCodes.Values, exitCode)
		switch r.ExitCodes.Operator {
		case corev1.ContainerRestartRuleOnExitCodesOpIn:
			if in {
				return i, true
			}
		case corev1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !in {
				return i, true
			}
		}
	}
	return 0, false
}
