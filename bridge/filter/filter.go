// Package filter decides, as a pure function of one cached slim pod, whether
// the bridge should publish an event for it. Publishing only on a change of
// the decision-relevant state keeps a busy cluster's status churn (probes,
// conditions, IPs) from ever reaching NATS or waking the function.
package filter

import (
	"fmt"
	"hash/fnv"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/istio-aux/istio-aux/functions/decision"
)

// Mode says which pods the bridge publishes.
type Mode string

const (
	// ModeQuit publishes only pods deciding Quit, so pods that are still
	// running never wake a function scaled to zero. The default.
	ModeQuit Mode = "quit"
	// ModeChanges publishes every state change of pods deciding Wait or
	// Quit; used to record scenarios.
	ModeChanges Mode = "changes"
)

// ParseMode reads ISTIO_AUX_PUBLISH; empty means ModeQuit.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeQuit:
		return ModeQuit, nil
	case ModeChanges:
		return ModeChanges, nil
	}
	return "", fmt.Errorf("publish mode %q: want %q or %q", s, ModeQuit, ModeChanges)
}

// Fingerprint hashes the state the quit decision reads: phase, deletion,
// restart policy, the extra-sidecar annotation and, per container and init
// container, its name, state kind, exit code and restart count. Two pods
// with the same fingerprint decide the same; resourceVersion-only changes
// (conditions, IPs, readiness) leave it unchanged.
func Fingerprint(pod *corev1.Pod) uint64 {
	h := fnv.New64a()
	var buf []byte
	field := func(s string) {
		buf = append(buf[:0], s...)
		buf = append(buf, 0)
		_, _ = h.Write(buf)
	}
	field(string(pod.Status.Phase))
	field(strconv.FormatBool(pod.DeletionTimestamp != nil))
	field(string(pod.Spec.RestartPolicy))
	field(pod.Annotations[decision.AnnotationSidecars])
	for _, c := range pod.Spec.InitContainers {
		field("init-spec:" + c.Name)
		if c.RestartPolicy != nil {
			field(string(*c.RestartPolicy))
		}
	}
	for _, c := range pod.Spec.Containers {
		field("spec:" + c.Name)
	}
	statuses := func(kind string, ss []corev1.ContainerStatus) {
		for _, s := range ss {
			field(kind + s.Name)
			field(stateKey(s.State))
			field(strconv.Itoa(int(s.RestartCount)))
		}
	}
	statuses("init:", pod.Status.InitContainerStatuses)
	statuses("app:", pod.Status.ContainerStatuses)
	return h.Sum64()
}

func stateKey(s corev1.ContainerState) string {
	switch {
	case s.Terminated != nil:
		return "terminated:" + strconv.Itoa(int(s.Terminated.ExitCode))
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting"
	}
	return "none"
}

// DedupID is the JetStream Nats-Msg-Id of a pod state: its uid and
// fingerprint. The CloudEvent id stays <uid>/<resourceVersion> (the
// contract), but deduplicating on the state rather than the resourceVersion
// is what keeps a restarted bridge from re-delivering a pod whose status
// churned (new resourceVersion, same decision) after it was published: the
// restarted bridge only sees the newest resourceVersion.
func DedupID(uid types.UID, fingerprint uint64) string {
	return string(uid) + "/" + strconv.FormatUint(fingerprint, 16)
}

// Input is everything Evaluate looks at.
type Input struct {
	Pod             *corev1.Pod
	NamespaceLabels map[string]string
	// Last is the fingerprint of the last state published for this pod, if
	// HasLast.
	Last    uint64
	HasLast bool
}

// Verdict is Evaluate's answer.
type Verdict struct {
	Publish     bool
	OptedIn     bool
	Fingerprint uint64
	Decision    decision.Decision
	// Reason is a short, stable metric label for why (not) published.
	Reason string
}

// Reasons a pod is (not) published; used as metric labels.
const (
	ReasonPublish   = "publish"
	ReasonOptedOut  = "opted-out"
	ReasonUnchanged = "unchanged"
	ReasonIgnored   = "ignored"
	ReasonWaiting   = "waiting"
)

// Evaluate is the change filter: publish when the pod is opted in, its
// decision is publishable in this mode and its fingerprint differs from the
// last published one.
func Evaluate(mode Mode, opts decision.Options, in Input) Verdict {
	v := Verdict{OptedIn: decision.OptedIn(in.NamespaceLabels, in.Pod.Labels, in.Pod.Annotations)}
	if !v.OptedIn {
		v.Reason = ReasonOptedOut
		return v
	}
	v.Decision = decision.Decide(in.Pod, opts)
	switch {
	case v.Decision.Outcome == decision.Ignore:
		v.Reason = ReasonIgnored
		return v
	case v.Decision.Outcome == decision.Wait && mode != ModeChanges:
		v.Reason = ReasonWaiting
		return v
	}
	v.Fingerprint = Fingerprint(in.Pod)
	if in.HasLast && in.Last == v.Fingerprint {
		v.Reason = ReasonUnchanged
		return v
	}
	v.Publish, v.Reason = true, ReasonPublish
	return v
}
