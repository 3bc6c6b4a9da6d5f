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

// WillRestart is the kubelet's ContainerShouldRestart (k8s.io/kubernetes
// pkg/api/v1/pod/util.go, v1.36) for a regular container that exited with
// exitCode under the pod's restart policy. Restart rules are only read when
// the container has its own restart policy (the API server requires one
// with rules); the first rule that matches decides; a rule matches on an
// exit code In or NotIn its values, and an unknown operator or action does
// not match (the kubelet skips it and falls back). Then the container's
// own policy decides, then the pod's: Always restarts, OnFailure restarts a
// non-zero exit, Never does not, and an unknown or empty pod policy is the
// API default, Always. RestartAllContainers is taken as the kubelet takes it
// with its feature gate on (beta, on by default since 1.36).
func WillRestart(c slim.Container, pod corev1.RestartPolicy, exitCode int32) Restart {
	if c.RestartPolicy != nil {
		if r, ok := matchingRule(c.RestartPolicyRules, exitCode); ok {
			switch r.Action {
			case corev1.ContainerRestartRuleActionRestart:
				return RestartContainer
			case corev1.ContainerRestartRuleActionRestartAllContainers:
				return RestartAll
			}
		}
		switch *c.RestartPolicy {
		case corev1.ContainerRestartPolicyAlways:
			return RestartContainer
		case corev1.ContainerRestartPolicyOnFailure:
			return restartIf(exitCode != 0)
		case corev1.ContainerRestartPolicyNever:
			return NoRestart
		}
	}
	switch pod {
	case corev1.RestartPolicyOnFailure:
		return restartIf(exitCode != 0)
	case corev1.RestartPolicyNever:
		return NoRestart
	}
	return RestartContainer
}

func restartIf(b bool) Restart {
	if b {
		return RestartContainer
	}
	return NoRestart
}

// matchingRule is the first rule whose exit codes match.
func matchingRule(rules slim.Rules, exitCode int32) (slim.Rule, bool) {
	for _, r := range rules {
		if r.ExitCodes == nil {
			continue
		}
		in := slices.Contains(r.ExitCodes.Values, exitCode)
		switch r.ExitCodes.Operator {
		case corev1.ContainerRestartRuleOnExitCodesOpIn:
			if in {
				return r, true
			}
		case corev1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !in {
				return r, true
			}
		}
	}
	return slim.Rule{}, false
}
