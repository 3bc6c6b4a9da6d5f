// Package keys spells every label, annotation and container name that
// istio-aux reads or writes on Kubernetes objects, its own and Istio's, in
// one place. They are part of istio-aux's user-facing API: changing one
// breaks existing workloads and namespaces.
package keys

// istio-aux's own names.
const (
	// LabelEnabled opts a namespace in when set to "true". On a pod
	// ("true"/"false") it overrides the namespace; it is a label because
	// admission selectors can match labels, not annotations.
	LabelEnabled = "istio-aux.dev/enabled"
	// LabelEnabledPods is LabelEnabled's value on a namespace whose pods opt
	// in one by one, each with its own label LabelEnabled=true: the namespace
	// is not opted in as a whole, but the exec policy lets the function quit
	// proxies there, and the bridge watches only those labelled pods.
	LabelEnabledPods = "pods"
	// LegacyLabel is the reference implementation's namespace label (value
	// LegacyLabelValue), honoured so existing namespaces keep working.
	LegacyLabel      = "io.datastrophic/istio-aux"
	LegacyLabelValue = "enabled"
	// AnnotationEnabled on a pod ("true"/"false") overrides its labels and
	// its namespace.
	AnnotationEnabled = "istio-aux.dev/enabled"
	// AnnotationSidecars lists extra sidecar container names on a pod
	// ("vault-agent,fluent-bit") that, like istio-proxy, are not apps.
	AnnotationSidecars = "istio-aux.dev/sidecars"
	// LabelWatched ("true") is what the webhook writes on every opted-in
	// run-to-completion pod it admits: the bridge's one cluster-wide pod
	// watch selects it, so the API server sends the bridge exactly the pods
	// it serves however many namespaces are opted in. Pods without it in an
	// opted-in namespace (created before the opt-in, before istio-aux, or
	// while the webhook was not called) are found by the bridge's sweep.
	LabelWatched = "istio-aux.dev/watched"
)

// Istio's names, as istio-aux reads and writes them.
const (
	// ProxyContainer is the name Istio's injector gives the sidecar.
	ProxyContainer = "istio-proxy"
	// ValidationContainer is the init container Istio's injector adds in
	// place of istio-init when Istio CNI sets up the traffic capture: it
	// checks that the capture is in place (pilot-agent istio-iptables
	// --run-validation).
	ValidationContainer = "istio-validation"
	// ValidationFailedCode is what ValidationContainer exits with when the
	// pod's traffic capture is not in place (Istio's
	// constants.ValidationErrorCode): the pod's sandbox was made before
	// Istio CNI's plugin was chained in on its node.
	ValidationFailedCode = 126
	// AnnotationProxyConfig is Istio's per-pod ProxyConfig, a YAML document.
	AnnotationProxyConfig = "proxy.istio.io/config"
	// AnnotationNativeSidecar asks Istio (>= 1.24) for a native sidecar
	// ("true") or a classic one ("false").
	AnnotationNativeSidecar = "sidecar.istio.io/nativeSidecar"
	// KeyInject is Istio's per-pod injection switch, read as a label first
	// and an annotation second.
	KeyInject = "sidecar.istio.io/inject"
	// LabelInjection opts a namespace into Istio's injection ("enabled").
	LabelInjection = "istio-injection"
	// LabelRevision selects the Istio revision (or revision tag) that
	// injects a namespace's pods, or one pod's; injected pods carry it as
	// an annotation naming the revision that injected them.
	LabelRevision = "istio.io/rev"
)
