// Package slim owns the slim pod: the few fields of a v1.Pod that the quit
// decision and the opt-in rule read, and nothing else. One type serves every
// path a pod takes through istio-aux:
//
//   - the bridge's informer cache holds it packed (Pack, Packed);
//   - the change filter compares its Fingerprint and deduplicates on DedupID;
//   - the CloudEvent the bridge publishes carries it as JSON, and its JSON
//     is a v1.Pod's, field for field, so an ApiServerSource event's full pod
//     decodes into it too, within the bounds in bounds.go;
//   - the proxy-quit function decides on it, for the event's pod and for
//     the live pod it reads (Of).
//
// Adding a field the decision needs means adding it here (the type, Of,
// the packed form, the fingerprint) and to TestRoundTripKeepsWhatTheDecisionReads.
package slim

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Pod is the slim pod. Its JSON field names are a v1.Pod's.
type Pod struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Meta       `json:"metadata"`
	Spec       Spec   `json:"spec"`
	Status     Status `json:"status"`
}

// Meta is the slim ObjectMeta.
type Meta struct {
	Name              string       `json:"name,omitempty"`
	Namespace         string       `json:"namespace,omitempty"`
	UID               types.UID    `json:"uid,omitempty"`
	ResourceVersion   string       `json:"resourceVersion,omitempty"`
	DeletionTimestamp *metav1.Time `json:"deletionTimestamp,omitempty"`
	// Labels holds only KeptLabels, Annotations only KeptAnnotations.
	Labels      Kept `json:"labels,omitempty"`
	Annotations Kept `json:"annotations,omitempty"`
}

// Spec is the slim PodSpec.
type Spec struct {
	RestartPolicy  corev1.RestartPolicy `json:"restartPolicy,omitempty"`
	InitContainers Containers           `json:"initContainers,omitempty"`
	Containers     Containers           `json:"containers,omitempty"`
}

// Containers is a bounded list of containers (see bounds.go).
type Containers []Container

// Container is what the kubelet's restart decision reads of a container:
// its name, its own restart policy and its restart rules (Kubernetes 1.35+).
type Container struct {
	Name               string                         `json:"name"`
	RestartPolicy      *corev1.ContainerRestartPolicy `json:"restartPolicy,omitempty"`
	RestartPolicyRules Rules                          `json:"restartPolicyRules,omitempty"`
}

// Rules is a bounded list of container restart rules.
type Rules []Rule

// Rule is a container restart rule (v1.ContainerRestartRule): on exit codes
// that match, take the action.
type Rule struct {
	Action    corev1.ContainerRestartRuleAction `json:"action,omitempty"`
	ExitCodes *ExitCodes                        `json:"exitCodes,omitempty"`
}

// ExitCodes is a rule's condition (v1.ContainerRestartRuleOnExitCodes).
type ExitCodes struct {
	Operator corev1.ContainerRestartRuleOnExitCodesOperator `json:"operator,omitempty"`
	Values   Codes                                          `json:"values,omitempty"`
}

// Codes is a bounded list of exit codes.
type Codes []int32

// Status is the slim PodStatus.
type Status struct {
	Phase                 corev1.PodPhase `json:"phase,omitempty"`
	InitContainerStatuses Statuses        `json:"initContainerStatuses,omitempty"`
	ContainerStatuses     Statuses        `json:"containerStatuses,omitempty"`
}

// Statuses is a bounded list of container statuses (see bounds.go).
type Statuses []ContainerStatus

// ContainerStatus keeps which state a container is in and, when it
// terminated, how it ended; of its last state only how it ended, when it
// did (Istio CNI's istio-validation that failed before its retry is
// found there). Messages, image ids and other times are dropped.
type ContainerStatus struct {
	Name         string    `json:"name"`
	Ready        bool      `json:"ready"`
	RestartCount int32     `json:"restartCount"`
	State        State     `json:"state"`
	LastState    LastState `json:"lastState,omitzero"`
}

// LastState is how a container's previous run ended, when it did: its exit
// code only.
type LastState struct {
	Terminated *LastTerminated `json:"terminated,omitempty"`
}

// LastTerminated is a previous run's end.
type LastTerminated struct {
	ExitCode int32 `json:"exitCode"`
}

// State is a container's state: at most one of the three is set.
type State struct {
	Waiting    *Waiting    `json:"waiting,omitempty"`
	Running    *Running    `json:"running,omitempty"`
	Terminated *Terminated `json:"terminated,omitempty"`
}

// Waiting is a container that has not started (yet, or again).
type Waiting struct {
	Reason string `json:"reason,omitempty"`
}

// Running is a running container.
type Running struct {
	StartedAt metav1.Time `json:"startedAt,omitempty"`
}

// Terminated is a container that ended.
type Terminated struct {
	ExitCode   int32       `json:"exitCode"`
	Reason     string      `json:"reason,omitempty"`
	FinishedAt metav1.Time `json:"finishedAt,omitempty"`
}

// Of returns the slim form of a pod. It never modifies pod and shares no
// maps or slices with it (only immutable strings), so it is safe on objects
// from an informer cache. It keeps every container and rule: the API
// server's pods are validated, and leaving one out could hide an app that
// still runs (the bounds in bounds.go are for JSON from anywhere else).
func Of(pod *corev1.Pod) *Pod {
	return &Pod{
		APIVersion: "v1",
		Kind:       "Pod",
		Meta: Meta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			DeletionTimestamp: copyTime(pod.DeletionTimestamp),
			Labels:            keep(pod.Labels, KeptLabels),
			Annotations:       keep(pod.Annotations, KeptAnnotations),
		},
		Spec: Spec{
			RestartPolicy:  pod.Spec.RestartPolicy,
			InitContainers: containersOf(pod.Spec.InitContainers),
			Containers:     containersOf(pod.Spec.Containers),
		},
		Status: Status{
			Phase:                 pod.Status.Phase,
			InitContainerStatuses: statusesOf(pod.Status.InitContainerStatuses),
			ContainerStatuses:     statusesOf(pod.Status.ContainerStatuses),
		},
	}
}

func copyTime(t *metav1.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

func containersOf(in []corev1.Container) Containers {
	if len(in) == 0 {
		return nil
	}
	out := make(Containers, len(in))
	for i, c := range in {
		out[i] = Container{Name: c.Name}
		if c.RestartPolicy != nil {
			p := *c.RestartPolicy
			out[i].RestartPolicy = &p
		}
		out[i].RestartPolicyRules = copyRules(c.RestartPolicyRules)
	}
	return out
}

func copyRules(in []corev1.ContainerRestartRule) Rules {
	if len(in) == 0 {
		return nil
	}
	return rulesOf(in, func(r corev1.ContainerRestartRule) Rule {
		if r.ExitCodes == nil {
			return Rule{Action: r.Action}
		}
		return Rule{Action: r.Action, ExitCodes: newExitCodes(r.ExitCodes.Operator, r.ExitCodes.Values)}
	})
}

// Clone is a deep copy of rs (nil stays nil): what the bridge's packed
// cache keeps of a pod's rules shares nothing with the pod it came from.
func (rs Rules) Clone() Rules {
	return rulesOf(rs, func(r Rule) Rule {
		if r.ExitCodes == nil {
			return Rule{Action: r.Action}
		}
		return Rule{Action: r.Action, ExitCodes: newExitCodes(r.ExitCodes.Operator, r.ExitCodes.Values)}
	})
}

// rulesOf makes Rules of in, one rule per element; nil stays nil.
func rulesOf[E any](in []E, rule func(E) Rule) Rules {
	if in == nil {
		return nil
	}
	out := make(Rules, len(in))
	for i, r := range in {
		out[i] = rule(r)
	}
	return out
}

// newExitCodes is a rule's condition, with its own copy of values.
func newExitCodes(op corev1.ContainerRestartRuleOnExitCodesOperator, values []int32) *ExitCodes {
	return &ExitCodes{Operator: op, Values: append(Codes(nil), values...)}
}

func statusesOf(in []corev1.ContainerStatus) Statuses {
	if len(in) == 0 {
		return nil
	}
	out := make(Statuses, len(in))
	for i, s := range in {
		out[i] = ContainerStatus{Name: s.Name, Ready: s.Ready, RestartCount: s.RestartCount, State: stateOf(s.State)}
		if t := s.LastTerminationState.Terminated; t != nil {
			out[i].LastState.Terminated = &LastTerminated{ExitCode: t.ExitCode}
		}
	}
	return out
}

func stateOf(in corev1.ContainerState) State {
	switch {
	case in.Terminated != nil:
		return State{Terminated: &Terminated{ExitCode: in.Terminated.ExitCode, Reason: in.Terminated.Reason, FinishedAt: in.Terminated.FinishedAt}}
	case in.Running != nil:
		return State{Running: &Running{StartedAt: in.Running.StartedAt}}
	case in.Waiting != nil:
		return State{Waiting: &Waiting{Reason: in.Waiting.Reason}}
	}
	return State{}
}

// ContainerStatus returns the status of the named container (init containers when
// init is true), or nil.
func (p *Pod) ContainerStatus(name string, init bool) *ContainerStatus {
	ss := p.Status.ContainerStatuses
	if init {
		ss = p.Status.InitContainerStatuses
	}
	for i := range ss {
		if ss[i].Name == name {
			return &ss[i]
		}
	}
	return nil
}
