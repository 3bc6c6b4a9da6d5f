package watch

import (
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
)

// Scope is which of a namespace's pods the bridge serves.
type Scope int

// Scopes, from a namespace's labels (ScopeOf).
const (
	// ScopeNone: none of the namespace's pods is served.
	ScopeNone Scope = iota
	// ScopeAll: the namespace is opted in (decision.NamespaceOptedIn, the
	// reference's legacy label included): every run-to-completion pod is
	// served, and a pod's own annotation or label may opt it out.
	ScopeAll
	// ScopeLabelled: the namespace is labelled istio-aux.dev/enabled=pods:
	// only pods labelled istio-aux.dev/enabled=true are served, as only
	// they reach the webhook.
	ScopeLabelled
)

// ScopeOf is the scope of a namespace with these labels. It agrees with
// decision.OptedIn on every pod it lets through, and with the webhook's
// selectors and the function's exec policy (config/403, config/204) on the
// namespaces: a pod outside them could be neither mutated nor quit, so the
// bridge does not serve it either.
func ScopeOf(namespaceLabels map[string]string) Scope {
	switch {
	case decision.NamespaceOptedIn(namespaceLabels):
		return ScopeAll
	case namespaceLabels[keys.LabelEnabled] == keys.LabelEnabledPods:
		return ScopeLabelled
	}
	return ScopeNone
}

// Admits reports whether a pod with these labels is in the scope: every
// pod of a namespace opted in as a whole, only those labelled
// istio-aux.dev/enabled=true (exactly, as the webhook's objectSelector
// matches it) in a namespace whose pods opt in one by one, none elsewhere.
// The watcher serves no other pod, whatever its own labels say.
func (s Scope) Admits(podLabels map[string]string) bool {
	switch s {
	case ScopeAll:
		return true
	case ScopeLabelled:
		return podLabels[keys.LabelEnabled] == "true"
	}
	return false
}

// Serves reports whether the watcher serves a pod with these labels and
// annotations in a namespace with these labels: its namespace's scope
// admits it, and the opt-in rule (decision.OptedIn) lets it in. The rule
// the webhook applies when it labels a pod keys.LabelWatched.
func Serves(namespaceLabels, podLabels, podAnnotations map[string]string) bool {
	return ScopeOf(namespaceLabels).Admits(podLabels) && decision.OptedIn(namespaceLabels, podLabels, podAnnotations)
}

// widens reports whether s admits pods that old did not: a namespace
// coming into scope, or opted in as a whole after its pods opted in one by
// one.
func (s Scope) widens(old Scope) bool {
	return s != old && (old == ScopeNone || s == ScopeAll)
}

// StraySelector selects the scope's pods that the cluster-wide watch does
// not bring: not labelled keys.LabelWatched=true (StraysSelector).
func (s Scope) StraySelector() string {
	sel := StraysSelector
	if s == ScopeLabelled {
		sel = keys.LabelEnabled + "=true," + sel
	}
	return sel
}

// String is the scope's metric label.
func (s Scope) String() string {
	switch s {
	case ScopeAll:
		return "all"
	case ScopeLabelled:
		return "labelled"
	}
	return "none"
}
