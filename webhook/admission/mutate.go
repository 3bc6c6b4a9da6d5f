package admission

import (
	"errors"
	"strings"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/webhook/proxyconfig"
)

// Outcome is what one admission did; it is also the metric label, so the set
// is small and fixed.
type Outcome string

const (
	// Mutated: the pod got our annotation.
	Mutated Outcome = "mutated"
	// Skipped: the pod is not ours, or already says what it wants.
	Skipped Outcome = "skipped"
	// Warned: the webhook could not do its job on this request (malformed
	// input, unexpected kind); the object is let through unchanged and the
	// client sees an admission warning.
	Warned Outcome = "warned"
	// Invalid: the request was not an AdmissionReview the webhook could
	// answer (it answers with an HTTP error; the API server then applies
	// the failure policy). Mutate never returns it.
	Invalid Outcome = "invalid"
)

// Stable reasons, for logs and tests.
const (
	ReasonNotOptedIn    = "not opted in"
	ReasonNoInjection   = "Istio will not inject this pod"
	ReasonNativeSidecar = "pod already has a native istio-proxy sidecar"
	// ReasonUserHold covers both spellings, proxyconfig.KeyHold and
	// KeyHoldProto.
	ReasonUserHold   = "user already set " + proxyconfig.KeyHold
	ReasonUserNative = "user already set " + keys.AnnotationNativeSidecar
	ReasonHold       = "hold application until proxy starts"
	ReasonNative     = "native sidecar requested"
	// ReasonBadProxyConfig: a config Istio rejects, or one istio-aux cannot
	// rewrite faithfully (anchors, repeated keys, several documents).
	ReasonBadProxyConfig = "malformed " + keys.AnnotationProxyConfig
	// ReasonNotAReview and ReasonTooLarge go with Invalid: a body that is
	// not an AdmissionReview, or longer than MaxReviewBytes.
	ReasonNotAReview = "not an AdmissionReview"
	ReasonTooLarge   = "review too large"
	// ReasonProxyConfigLimit: a config over istio-aux's size limits.
	ReasonProxyConfigLimit = keys.AnnotationProxyConfig + " over istio-aux's limits"
)

// Mutation is the decision for one pod: at most one annotation to set, and
// whether to label it for the bridge. Outcome and Reason describe the
// annotation (the hold or the native sidecar); the label is independent of
// them.
type Mutation struct {
	Outcome Outcome
	Reason  string
	// Key and Value are the annotation to set when Outcome is Mutated.
	Key, Value string
	// Label: set keys.LabelWatched=true, on every opted-in run-to-completion
	// pod Istio injects that lacks it, whatever the annotation's outcome
	// (a pod whose hold the user wrote, or whose config istio-aux cannot
	// rewrite, still needs its quit).
	Label bool
	// Warning is returned to the client as an admission warning.
	Warning string
}

// WarningPrefix begins every warning Mutate returns.
const WarningPrefix = "istio-aux did not add the hold: "

// Mutate decides what to do with a pod at CREATE, given its namespace's
// labels and the configured mode. It is pure and never modifies pod.
func Mutate(pod *Pod, namespaceLabels map[string]string, mode Mode) Mutation {
	if labels, annotations := pod.optIn(); !decision.OptedIn(namespaceLabels, labels, annotations) {
		return Mutation{Outcome: Skipped, Reason: ReasonNotOptedIn}
	}
	if !istioWillInject(pod) {
		return Mutation{Outcome: Skipped, Reason: ReasonNoInjection}
	}
	m := hold(pod, mode)
	m.Label = pod.runsToCompletion() && !pod.watched()
	return m
}

// hold is the annotation for an opted-in pod Istio will inject.
func hold(pod *Pod, mode Mode) Mutation {
	if pod.nativeProxy() {
		return Mutation{Outcome: Skipped, Reason: ReasonNativeSidecar}
	}
	a := pod.annotations()
	if mode == ModeNative {
		if a.Native.set {
			return Mutation{Outcome: Skipped, Reason: ReasonUserNative}
		}
		return Mutation{Outcome: Mutated, Reason: ReasonNative, Key: keys.AnnotationNativeSidecar, Value: "true"}
	}
	if a.ProxyConfig.tooLong {
		return unchanged(proxyconfig.TooLong())
	}
	merged, changed, err := proxyconfig.MergeHold(a.ProxyConfig.text)
	switch {
	case err != nil:
		return unchanged(err)
	case !changed:
		return Mutation{Outcome: Skipped, Reason: ReasonUserHold}
	}
	return Mutation{Outcome: Mutated, Reason: ReasonHold, Key: keys.AnnotationProxyConfig, Value: merged}
}

// unchanged is the mutation for a proxy config istio-aux does not rewrite
// (err from proxyconfig says why).
func unchanged(err error) Mutation {
	reason := ReasonBadProxyConfig
	if le := (*proxyconfig.LimitError)(nil); errors.As(err, &le) {
		reason = ReasonProxyConfigLimit
	}
	return Mutation{Outcome: Warned, Reason: reason, Warning: WarningPrefix + err.Error()}
}

// istioWillInject reads the pod the way Istio's injector (injectRequired)
// does: never on hostNetwork; for sidecar.istio.io/inject the label wins over
// the annotation, y/yes/true/on (any case) or no value at all leave the
// decision to Istio's policy, anything else turns injection off. Annotating
// a pod Istio will not inject would be harmless but noisy, and counts it as
// mutated when nothing will change.
func istioWillInject(pod *Pod) bool {
	if pod.Spec.HostNetwork {
		return false
	}
	switch strings.ToLower(pod.inject()) {
	case "", "y", "yes", "true", "on":
		return true
	}
	return false
}
