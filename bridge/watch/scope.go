package watch

import (
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
)

// Scope is which of a namespace's pods the bridge watches.
type Scope int

// Scopes, from a namespace's labels (ScopeOf).
const (
	// ScopeNone: no watch; none of the namespace's pods reach the bridge.
	ScopeNone Scope = iota
	// ScopeAll: the namespace is opted in (decision.NamespaceOptedIn, the
	// reference's legacy label included): every run-to-completion pod is
	// watched, and a pod's own annotation or label may opt it out.
	ScopeAll
	// ScopeLabelled: the namespace is labelled istio-aux.dev/enabled=pods:
	// only pods labelled istio-aux.dev/enabled=true are watched (a label
	// selector the API server applies), as only they reach the webhook.
	ScopeLabelled
)

// ScopeOf is the watch a namespace with these labels gets. It agrees with
// decision.OptedIn on every pod it lets through, and with the webhook's
// selectors and the function's exec policy (config/403, config/204) on the
// namespaces: a pod outside them could be neither mutated nor quit, so the
// bridge does not watch it either.
func ScopeOf(namespaceLabels map[string]string) Scope {
	switch {
	case decision.NamespaceOptedIn(namespaceLabels):
		return ScopeAll
	case namespaceLabels[keys.LabelEnabled] == keys.LabelEnabledPods:
		return ScopeLabelled
	}
	return ScopeNone
}

// LabelSelector is the label selector of the scope's pod watch ("" for
// every pod). The value is matched exactly, as the webhook's
// objectSelector matches it.
func (s Scope) LabelSelector() string {
	if s == ScopeLabelled {
		return keys.LabelEnabled + "=true"
	}
	return ""
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
