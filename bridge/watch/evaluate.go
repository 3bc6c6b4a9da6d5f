package watch

import (
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// Input is everything Evaluate looks at.
type Input struct {
	// Pod is the pod, or what the decision reads of it (Packed.Unpack).
	Pod             *slim.Pod
	NamespaceLabels map[string]string
	// Fingerprint is slim.Fingerprint of the pod as it was read (the
	// cache computes it when it packs a pod: what Pod keeps of the pod's
	// state is less than the fingerprint covers).
	Fingerprint uint64
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

// Reasons a pod is (not) published: the reason label of
// istio_aux_bridge_filtered_total.
const (
	ReasonPublish   = "publish"
	ReasonOptedOut  = "opted-out"
	ReasonUnchanged = "unchanged"
	ReasonIgnored   = "ignored"
	ReasonWaiting   = "waiting"
)

// Evaluate is the change filter, a pure function of one pod: publish when
// the pod is opted in, its decision acts (Quit, Replace; or Wait too, with
// publishWaits) and its fingerprint differs from the last published one.
// Publishing only on a change of the decision's inputs keeps a busy
// cluster's status churn (probes, conditions, IPs) from ever reaching NATS
// or waking the function.
func Evaluate(opts decision.Options, publishWaits bool, in Input) Verdict {
	v := Verdict{OptedIn: decision.OptedIn(in.NamespaceLabels, in.Pod.Labels, in.Pod.Annotations)}
	if !v.OptedIn {
		v.Reason = ReasonOptedOut
		return v
	}
	v.Decision = decision.DecideForAnyKubelet(in.Pod, opts)
	switch {
	case v.Decision.Outcome == decision.Ignore:
		v.Reason = ReasonIgnored
		return v
	case v.Decision.Outcome == decision.Wait && !publishWaits:
		v.Reason = ReasonWaiting
		return v
	}
	v.Fingerprint = in.Fingerprint
	if in.HasLast && in.Last == v.Fingerprint {
		v.Reason = ReasonUnchanged
		return v
	}
	v.Publish, v.Reason = true, ReasonPublish
	return v
}
