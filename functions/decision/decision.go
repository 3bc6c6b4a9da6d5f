package decision

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Outcome is what istio-aux should do about one pod right now.
type Outcome int

const (
	// Ignore: istio-aux has nothing to do with this pod, now or later
	// (or, for a finished pod, any more).
	Ignore Outcome = iota
	// Wait: the pod is ours but its apps are not done (or will be retried).
	Wait
	// Quit: every app has finished for good; quit istio-proxy.
	Quit
)

func (o Outcome) String() string {
	switch o {
	case Ignore:
		return "ignore"
	case Wait:
		return "wait"
	case Quit:
		return "quit"
	}
	return "unknown"
}

// Decision is an Outcome with a stable, human-readable reason (used in logs,
// Kubernetes Events and as a metric label, so keep the set of reasons small).
type Decision struct {
	Outcome Outcome
	Reason  string
}

// Reasons, one per row of the decision table in DESIGN.md.
const (
	ReasonNoProxy        = "no classic istio-proxy container"
	ReasonNativeSidecar  = "istio-proxy is a native sidecar"
	ReasonDeleting       = "pod is being deleted"
	ReasonFinished       = "pod has finished"
	ReasonProxyDone      = "istio-proxy already terminated"
	ReasonRestartAlways  = "restartPolicy Always"
	ReasonNoApps         = "no app containers"
	ReasonAppsRunning    = "apps not terminated yet"
	ReasonAppWillRestart = "an app failed and restartPolicy OnFailure will restart it"
	ReasonAppsDone       = "all apps terminated"
)

// Options tune the decision.
type Options struct {
	// ExtraSidecars are container names that, like istio-proxy, are not
	// apps. The pod's AnnotationSidecars adds to them.
	ExtraSidecars []string
}

// Decide is the quit decision table of DESIGN.md. It is a pure function of
// one pod and never mutates it.
func Decide(pod *corev1.Pod, opts Options) Decision {
	if HasNativeProxy(pod) {
		return Decision{Ignore, ReasonNativeSidecar}
	}
	if !HasClassicProxy(pod) {
		return Decision{Ignore, ReasonNoProxy}
	}
	if pod.DeletionTimestamp != nil {
		return Decision{Ignore, ReasonDeleting}
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return Decision{Ignore, ReasonFinished}
	}
	statuses := make(map[string]*corev1.ContainerStatus, len(pod.Status.ContainerStatuses))
	for i := range pod.Status.ContainerStatuses {
		statuses[pod.Status.ContainerStatuses[i].Name] = &pod.Status.ContainerStatuses[i]
	}
	if s := statuses[ProxyContainer]; s != nil && s.State.Terminated != nil {
		return Decision{Ignore, ReasonProxyDone}
	}
	policy := pod.Spec.RestartPolicy
	if policy != corev1.RestartPolicyNever && policy != corev1.RestartPolicyOnFailure {
		// The API server defaults an empty policy to Always.
		return Decision{Ignore, ReasonRestartAlways}
	}

	sidecars := sidecarNames(pod, opts)
	apps, failed := 0, false
	for _, c := range pod.Spec.Containers {
		if slices.Contains(sidecars, c.Name) {
			continue
		}
		apps++
		s := statuses[c.Name]
		if s == nil || s.State.Terminated == nil {
			// Not started, waiting (including a crash-loop back-off between
			// OnFailure attempts) or running.
			return Decision{Wait, ReasonAppsRunning}
		}
		if s.State.Terminated.ExitCode != 0 {
			failed = true
		}
	}
	if apps == 0 {
		return Decision{Ignore, ReasonNoApps}
	}
	if failed && policy == corev1.RestartPolicyOnFailure {
		return Decision{Wait, ReasonAppWillRestart}
	}
	return Decision{Quit, ReasonAppsDone}
}

// HasClassicProxy reports whether istio-proxy runs as a regular container.
func HasClassicProxy(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool {
		return c.Name == ProxyContainer
	})
}

// HasNativeProxy reports whether istio-proxy is a native sidecar (an init
// container with restartPolicy Always), which the kubelet stops by itself.
func HasNativeProxy(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool {
		return c.Name == ProxyContainer && c.RestartPolicy != nil &&
			*c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	})
}

// sidecarNames is istio-proxy, the configured extra sidecars and the pod's
// own AnnotationSidecars list.
func sidecarNames(pod *corev1.Pod, opts Options) []string {
	names := append([]string{ProxyContainer}, opts.ExtraSidecars...)
	for _, n := range strings.Split(pod.Annotations[AnnotationSidecars], ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}
