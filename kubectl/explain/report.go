// Package explain says, for one pod, what istio-aux does about it and why:
// whether it is opted in and by what, whether the webhook's hold is in it
// (and if not, the likely cause), the kind of its proxy, the quit decision
// now with each app's part in it, what happens next, and istio-aux's last
// Events on it. kubectl istio-aux explain prints it.
//
// Every answer comes from the code that acts: the opt-in and the decision
// from pkg/decision, the hold from the webhook's own Mutate, the bridge's
// reach from its ScopeOf. Explain is a pure function of what gather.go
// reads, and its report's JSON field names are a stable interface.
package explain

import "time"

// Report is what explain prints: one entry per pod asked about, and notes
// on what could not be read (the answers then assume the defaults).
type Report struct {
	Pods  []Pod    `json:"pods"`
	Notes []string `json:"notes,omitempty"`
}

// Verdict sums up a pod for scripts (and the exit code).
type Verdict string

// Verdicts.
const (
	// VerdictOK: istio-aux (or the kubelet, for a native sidecar) has
	// done, is doing or will do what the pod needs.
	VerdictOK Verdict = "ok"
	// VerdictOutside: istio-aux has nothing to do with the pod (not opted
	// in, no Istio sidecar, not a run-to-completion pod), and nothing is
	// wrong with that.
	VerdictOutside Verdict = "outside"
	// VerdictProblem: something needs a person: Problems says what.
	VerdictProblem Verdict = "problem"
)

// Pod is the explanation of one pod.
type Pod struct {
	Namespace string  `json:"namespace"`
	Name      string  `json:"name"`
	Verdict   Verdict `json:"verdict"`
	OptIn     OptIn   `json:"optIn"`
	// Proxy is the kind of istio-proxy: ProxyClassic, ProxyNative or
	// ProxyNone.
	Proxy    string   `json:"proxy"`
	Hold     Hold     `json:"hold"`
	Decision Decision `json:"decision"`
	Apps     []App    `json:"apps"`
	// Sidecars are the containers that are not apps (istio-proxy aside),
	// each with where it was named.
	Sidecars []Sidecar `json:"sidecars,omitempty"`
	// Next is what happens next, in a sentence.
	Next string `json:"next"`
	// Events are istio-aux's last Events on the pod, oldest first.
	Events []Event `json:"events"`
	// Problems are what needs a person; Checks the commands that show more.
	Problems []string `json:"problems,omitempty"`
	Checks   []string `json:"checks,omitempty"`
}

// Kinds of proxy.
const (
	ProxyClassic = "classic"
	ProxyNative  = "native"
	ProxyNone    = "none"
)

// OptIn is whether the pod is opted in, by what, and whether istio-aux's
// parts can see it: the webhook (its selectors) and the bridge (the
// namespaces and labels it watches).
type OptIn struct {
	OptedIn bool `json:"optedIn"`
	// Source is decision.OptInSource's name: pod-annotation, pod-label,
	// namespace-label, legacy-namespace-label or none.
	Source string `json:"source"`
	// Webhook and Bridge say whether the API server calls the webhook for
	// the pod and whether the bridge watches it.
	Webhook bool   `json:"webhook"`
	Bridge  bool   `json:"bridge"`
	Text    string `json:"text"`
}

// Hold is whether the app waits for its proxy at start.
type Hold struct {
	// Present: Istio put the hold in (istio-proxy first with its postStart
	// `pilot-agent wait`), or the proxy is a native sidecar.
	Present bool `json:"present"`
	// How is HowProxyFirst or HowNative when Present.
	How string `json:"how,omitempty"`
	// Cause is, when the hold is missing, its likely cause (Cause*).
	Cause string `json:"cause,omitempty"`
	Text  string `json:"text"`
}

// How the hold is in a pod.
const (
	HowProxyFirst = "proxy-first"
	HowNative     = "native"
)

// Likely causes of a missing hold.
const (
	CauseNoProxy            = "no-proxy"              // Istio injected no sidecar: nothing to hold
	CauseNotOptedIn         = "not-opted-in"          // istio-aux was not asked to
	CauseNotReached         = "not-reached"           // opted in where the webhook's selectors do not look
	CauseUserValue          = "user-value"            // the pod's own setting wins
	CauseMalformedConfig    = "malformed-config"      // the webhook left a config it cannot rewrite
	CauseNotApplied         = "not-applied"           // the annotation is there, Istio did not apply it
	CauseCreatedBeforeOptIn = "created-before-opt-in" // the namespace was labelled after the pod's creation
	CauseWebhookMissing     = "webhook-missing"       // no MutatingWebhookConfiguration, now or when the pod was created
	CauseWebhookDown        = "webhook-down"          // failurePolicy Ignore, and no webhook endpoint, or none up when the pod was created
	CauseWebhookNotCalled   = "webhook-not-called"    // the webhook would mutate it now: it was not called, or failed while failurePolicy was Ignore
)

// Decision is pkg/decision's answer now, or "ignore" with ReasonNotOptedIn
// for a pod outside the opt-in (which the function never decides on).
type Decision struct {
	// Outcome is quit, wait or ignore.
	Outcome string `json:"outcome"`
	// Reason is the decision's stable reason (decision.Reason*), or
	// ReasonNotOptedIn.
	Reason string `json:"reason"`
	Text   string `json:"text"`
}

// ReasonNotOptedIn is the decision's reason for a pod outside the opt-in.
const ReasonNotOptedIn = "not opted in"

// App is one app container's part in the decision.
type App struct {
	Name string `json:"name"`
	// State is running, waiting, terminated or not-started.
	State    string `json:"state"`
	ExitCode *int32 `json:"exitCode,omitempty"`
	Restarts int32  `json:"restarts"`
	// RunsAgain says, for a terminated app, whether the kubelet will run
	// it again.
	RunsAgain *bool  `json:"runsAgain,omitempty"`
	Text      string `json:"text"`
}

// Sidecar is a container that is not an app, and where it was named
// ("config-istio-aux" or "annotation").
type Sidecar struct {
	Name  string `json:"name"`
	Where string `json:"where"`
}

// Event is one of istio-aux's Kubernetes Events on the pod.
type Event struct {
	Reason  string    `json:"reason"`
	Type    string    `json:"type"`
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
	Count   int32     `json:"count"`
}
