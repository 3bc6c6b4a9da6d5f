// Package decision holds istio-aux's policy as pure functions over values:
// which pods are opted in, and whether a pod's istio-proxy should be quit.
// The webhook, the bridge's change filter and the proxy-quit function all
// decide through this package so that they can never disagree.
package decision

// Names istio-aux reads from workloads. They are part of the user-facing API.
const (
	// ProxyContainer is the name Istio's injector gives the sidecar.
	ProxyContainer = "istio-proxy"

	// LabelEnabled opts a namespace in when set to "true".
	LabelEnabled = "istio-aux.dev/enabled"
	// LegacyLabel is the reference implementation's namespace label
	// (value LegacyLabelValue); honoured so existing namespaces keep working.
	LegacyLabel      = "io.datastrophic/istio-aux"
	LegacyLabelValue = "enabled"

	// AnnotationEnabled on a pod ("true" or "false") overrides its labels and
	// its namespace; the pod label of the same name overrides its namespace.
	AnnotationEnabled = "istio-aux.dev/enabled"
	// AnnotationSidecars lists extra sidecar container names on a pod
	// ("vault-agent,fluent-bit") that, like istio-proxy, are not apps.
	AnnotationSidecars = "istio-aux.dev/sidecars"
)
