package decision

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// Inputs is what Decide and OptedIn read of p in its current state, and
// nothing more: Decide(Inputs(p), o) is Decide(p, o) for every o, and
// OptedIn reads the same labels and annotations. It is what the bridge's
// event carries (podevent.New), so that no valid pod makes an event larger
// than the stream takes: restart rules, whose exit code lists alone can
// reach hundreds of KiB in a valid pod, shrink to the one rule that decides
// each terminated app's current exit code.
//
//   - regular containers: each one's name and restart policy; for an app
//     that terminated, the first rule matching its exit code (the one
//     WillRestart obeys), narrowed to that code; no rules otherwise (a
//     container still running is waited for whatever its rules say);
//   - init containers: only a native istio-proxy (HasNativeProxy), without
//     rules (Decide restarts no init container);
//   - statuses: each regular container's state kind and exit code, and a
//     native istio-proxy's; of a pod CNIRaced, its istio-validation's as
//     RacedValidation;
//   - the opt-in label and annotation when they say true or false (other
//     values are ignored anyway), the sidecars annotation's names as
//     AnnotatedSidecars reads them.
func Inputs(p *slim.Pod) *slim.Pod {
	out := &slim.Pod{APIVersion: p.APIVersion, Kind: p.Kind,
		Meta: slim.Meta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp, Labels: optIn(p.Labels, keys.LabelEnabled), Annotations: optIn(p.Annotations, keys.AnnotationEnabled)},
		Spec:   slim.Spec{RestartPolicy: p.Spec.RestartPolicy},
		Status: slim.Status{Phase: p.Status.Phase},
	}
	if names := p.AnnotatedSidecars(); len(names) > 0 {
		if out.Annotations == nil {
			out.Annotations = slim.Kept{}
		}
		out.Annotations[keys.AnnotationSidecars] = strings.Join(names, ",")
	}
	for _, c := range p.Spec.InitContainers {
		if IsNativeProxy(c.Name, c.RestartPolicy) {
			out.Spec.InitContainers = append(out.Spec.InitContainers, slim.Container{Name: c.Name, RestartPolicy: c.RestartPolicy})
		}
	}
	if len(out.Spec.InitContainers) > 0 {
		if s := p.ContainerStatus(keys.ProxyContainer, true); s != nil {
			out.Status.InitContainerStatuses = slim.Statuses{stateOnly(*s)}
		}
	}
	if CNIRaced(p) {
		out.Status.InitContainerStatuses = append(out.Status.InitContainerStatuses, RacedValidation())
	}
	for _, c := range p.Spec.Containers {
		in := slim.Container{Name: c.Name, RestartPolicy: c.RestartPolicy}
		if s := p.ContainerStatus(c.Name, false); c.RestartPolicy != nil && s != nil && s.State.Terminated != nil {
			code := s.State.Terminated.ExitCode
			if r, ok := matchingRule(c.RestartPolicyRules, code); ok {
				in.RestartPolicyRules = slim.Rules{{Action: r.Action,
					ExitCodes: &slim.ExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: slim.Codes{code}}}}
			}
		}
		out.Spec.Containers = append(out.Spec.Containers, in)
	}
	for _, s := range p.Status.ContainerStatuses {
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, stateOnly(s))
	}
	return out
}

// optIn is m's key when its value says true or false, trimmed and lower
// case as OptedIn reads it.
func optIn(m slim.Kept, key string) slim.Kept {
	v := strings.ToLower(strings.TrimSpace(m[key]))
	if v != "true" && v != "false" {
		return nil
	}
	return slim.Kept{key: v}
}

// stateOnly is a status with what Decide reads: the state's kind and a
// terminated container's exit code.
func stateOnly(s slim.ContainerStatus) slim.ContainerStatus {
	out := slim.ContainerStatus{Name: s.Name}
	switch {
	case s.State.Terminated != nil:
		out.State.Terminated = &slim.Terminated{ExitCode: s.State.Terminated.ExitCode}
	case s.State.Running != nil:
		out.State.Running = &slim.Running{}
	case s.State.Waiting != nil:
		out.State.Waiting = &slim.Waiting{}
	}
	return out
}

// RacedValidation is the status of istio-validation that Inputs gives a pod
// CNIRaced: it exited keys.ValidationFailedCode. Whether it has been
// waiting to run again since, and its other fields, decide nothing.
func RacedValidation() slim.ContainerStatus {
	return slim.ContainerStatus{Name: keys.ValidationContainer, State: slim.State{Terminated: &slim.Terminated{ExitCode: keys.ValidationFailedCode}}}
}
