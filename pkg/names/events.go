package names

// Who records Events: the name each component records its Kubernetes
// Events as. client-go's recorder writes it both as the Event's
// source.component and as its reportingController; kubectl istio-aux
// takes an Event for istio-aux's only when it names SourceProxyQuit there.
// Each is also the component's logger name and its level's key in
// config-logging.
const (
	// SourceBridge records the Events of the bridge (and of the
	// all-in-one): its settings' on ConfigMap config-istio-aux.
	SourceBridge = "istio-aux-bridge"
	// SourceProxyQuit records the proxy-quit function's Events: its quits
	// on pods, its settings' on the ConfigMap.
	SourceProxyQuit = "istio-aux-proxyquit"
)

// Reasons of the Events the proxy-quit function records on pods.
const (
	// ReasonProxyQuit: the function quit the pod's istio-proxy.
	ReasonProxyQuit = "ProxyQuit"
	// ReasonProxyQuitFailed: a quit failed, for good or to be retried; the
	// message says which, and why.
	ReasonProxyQuitFailed = "ProxyQuitFailed"
	// ReasonPodReplaced: the function deleted a pod Istio CNI's start race
	// left unable to start, so that its controller makes another.
	ReasonPodReplaced = "PodReplaced"
	// ReasonPodReplaceFailed: such a pod could not be deleted, or has no
	// controller to make another and is left alone; the message says why.
	ReasonPodReplaceFailed = "PodReplaceFailed"
)

// Why a quit failed for good: the word in parentheses of a
// ProxyQuitFailed Event's message ("failed for good (denied)") and the
// reason label of istio_aux_proxyquit_final_failures_total, a closed set.
const (
	FinalDenied   = "denied"    // the API server refused the exec (403: the exec policy, RBAC)
	FinalRejected = "rejected"  // the API server found the exec request invalid for this pod (400, 422)
	FinalExitCode = "exit_code" // the quit command ran and exited non-zero
	FinalNotFound = "not_found" // the quit command is not in the container: not Istio's proxy
)
