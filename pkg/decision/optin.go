package decision

import (
	"strings"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

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
	if v, ok := parseBool(podAnnotations[keys.AnnotationEnabled]); ok {
		return v
	}
	if v, ok := parseBool(podLabels[keys.LabelEnabled]); ok {
		return v
	}
	return NamespaceOptedIn(namespaceLabels)
}

// NamespaceOptedIn reports whether a namespace's labels opt its pods in.
func NamespaceOptedIn(labels map[string]string) bool {
	return labels[keys.LabelEnabled] == "true" || labels[keys.LegacyLabel] == keys.LegacyLabelValue
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
