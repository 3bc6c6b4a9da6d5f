package decision

import (
	"strings"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// OptInSource is the setting that decided a pod's opt-in: the most specific
// one that says true or false (OptInOf).
type OptInSource int

// Opt-in sources, from the most specific.
const (
	// SourceNone: nothing opts the pod in or out (not opted in).
	SourceNone OptInSource = iota
	// SourcePodAnnotation: the pod's annotation istio-aux.dev/enabled.
	SourcePodAnnotation
	// SourcePodLabel: the pod's label istio-aux.dev/enabled.
	SourcePodLabel
	// SourceNamespaceLabel: the namespace label istio-aux.dev/enabled=true.
	SourceNamespaceLabel
	// SourceLegacyNamespaceLabel: the reference implementation's namespace
	// label io.datastrophic/istio-aux=enabled.
	SourceLegacyNamespaceLabel
)

// String is the source's stable name (kubectl istio-aux's JSON).
func (s OptInSource) String() string {
	switch s {
	case SourcePodAnnotation:
		return "pod-annotation"
	case SourcePodLabel:
		return "pod-label"
	case SourceNamespaceLabel:
		return "namespace-label"
	case SourceLegacyNamespaceLabel:
		return "legacy-namespace-label"
	}
	return "none"
}

// OptIn is whether a pod is opted in and which setting decided it.
type OptIn struct {
	OptedIn bool
	Source  OptInSource
}

// OptInOf is OptedIn with the setting that decided it, for those who must
// explain the answer (kubectl istio-aux explain). OptedIn is built on it, so
// the two never disagree.
func OptInOf(namespaceLabels, podLabels, podAnnotations map[string]string) OptIn {
	if v, ok := parseBool(podAnnotations[keys.AnnotationEnabled]); ok {
		return OptIn{v, SourcePodAnnotation}
	}
	if v, ok := parseBool(podLabels[keys.LabelEnabled]); ok {
		return OptIn{v, SourcePodLabel}
	}
	s := namespaceSource(namespaceLabels)
	return OptIn{s != SourceNone, s}
}

// OptedIn reports whether istio-aux handles a pod, given its namespace's
// labels and the pod's own labels and annotations. Most specific wins:
//
//  1. pod annotation istio-aux.dev/enabled "true"/"false";
//  2. pod label istio-aux.dev/enabled "true"/"false" (the label exists because
//     admission selectors can match labels but not annotations: it is how a
//     single pod in an unlabelled namespace reaches the webhook);
//  3. the namespace labels (NamespaceOptedIn).
//
// Any other value is ignored rather than guessed at, so a typo never silently
// flips a pod either way.
func OptedIn(namespaceLabels, podLabels, podAnnotations map[string]string) bool {
	return OptInOf(namespaceLabels, podLabels, podAnnotations).OptedIn
}

// NamespaceOptedIn reports whether a namespace's labels opt its pods in.
func NamespaceOptedIn(labels map[string]string) bool {
	return namespaceSource(labels) != SourceNone
}

// namespaceSource is the namespace label that opts its pods in, istio-aux's
// own first.
func namespaceSource(labels map[string]string) OptInSource {
	switch {
	case labels[keys.LabelEnabled] == "true":
		return SourceNamespaceLabel
	case labels[keys.LegacyLabel] == keys.LegacyLabelValue:
		return SourceLegacyNamespaceLabel
	}
	return SourceNone
}

func parseBool(s string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}
