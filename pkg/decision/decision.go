// Package decision is istio-aux's policy as pure functions over values:
// which pods are opted in (OptedIn) and whether a pod's istio-proxy should
// be quit now (Decide). The webhook, the bridge's change filter and the
// proxy-quit function all decide through this package, so they can never
// disagree. docs/design.md has the decision table in prose.
package decision

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// Outcome is what istio-aux should do about one pod right now.
type Outcome int

const (
	// Ignore: istio-aux has nothing to do with this pod, now or later
	// (or, for a finished pod, any more).
	Ignore Outcome = iota
	// Wait: the pod is ours but its apps are not done, or the kubelet will
	// run one of them again.
	Wait
	// Quit: no app will run again; quit istio-proxy.
	Quit
	// Replace: the pod can never start (Istio CNI's start race, CNIRaced):
	// delete it, so that its controller makes another.
	Replace
)

// Acts reports whether the outcome asks istio-aux to act on the pod now:
// quit its proxy, or replace it. The bridge publishes such pods and the
// function acts on them; it answers every other outcome without a call.
func (o Outcome) Acts() bool { return o == Quit || o == Replace }

func (o Outcome) String() string {
	switch o {
	case Ignore:
		return "ignore"
	case Wait:
		return "wait"
	case Quit:
		return "quit"
	case Replace:
		return "replace"
	}
	return "unknown"
}

// Decision is an Outcome with a stable, human-readable reason (used in logs,
// Kubernetes Events and as a metric label, so the set of reasons is small).
type Decision struct {
	Outcome Outcome
	Reason  string
}

// Reasons, one per row of the decision table.
const (
	ReasonNoProxy        = "no classic istio-proxy container"
	ReasonNativeSidecar  = "istio-proxy is a native sidecar"
	ReasonDeleting       = "pod is being deleted"
	ReasonFinished       = "pod has finished"
	ReasonProxyDone      = "istio-proxy already terminated"
	ReasonRestartAlways  = "restartPolicy Always"
	ReasonNoApps         = "no app containers"
	ReasonAppsRunning    = "apps not terminated yet"
	ReasonAppWillRestart = "the kubelet will run an app again"
	ReasonRestartAll     = "a restart rule will restart every container"
	ReasonAppsDone       = "all apps terminated"
	ReasonCNIRace        = "Istio CNI had not set up the pod's traffic capture"
)

// Options tune the decision. They are configuration, read once per process.
type Options struct {
	// ExtraSidecars are container names that, like istio-proxy, are not
	// apps. A pod's sidecars annotation adds to them.
	ExtraSidecars []string
	// QuitNative also quits a native istio-proxy (an init container with
	// restartPolicy Always) once no app will run again, instead of leaving
	// it to the kubelet, which stops it with SIGTERM and waits for Istio's
	// preStop drain. Off by default (the quit-native setting).
	QuitNative bool
	// Kubelet is the kubelet of the pod's node, for those who know it (the
	// zero value: the newest). Unlike the fields above it is a fact of one
	// pod, not configuration: set it on a copy, per pod.
	Kubelet Kubelet
}

// Decide answers, for one pod, whether istio-proxy should be quit: only when
// every app container has terminated and the kubelet will run none of them
// again. It is a pure function of the pod and never modifies it. One pod
// is answered Replace instead: one that Istio CNI's start race left unable
// ever to start (CNIRaced).
//
// Deliberate choices, checked against the kubelet's code (v1.36):
//   - Apps are spec.containers other than istio-proxy and the extra
//     sidecars. Init containers are not apps: regular ones have finished
//     before any app starts (an app waiting on them is "not terminated"),
//     and native sidecars (vault-agent as an init container with
//     restartPolicy Always) are stopped by the kubelet once the regular
//     containers are done, which the quit is what allows. Ephemeral
//     containers do not keep a pod from finishing and are not read.
//   - Whether an app runs again is what the pod's kubelet, of its version
//     (opts.Kubelet), decides: from 1.35 its restartPolicyRules first
//     (first match wins; In/NotIn on exit codes), then its own
//     restartPolicy, then the pod's; before, the pod's alone (WillRestart).
//   - A rule whose action is RestartAllContainers restarts every container,
//     istio-proxy included, in place: the pod will run again, so istio-aux
//     waits. (Its feature gate is beta and on since 1.36; Node Declared
//     Features keep such pods off kubelets without it.)
//   - A native istio-proxy is the kubelet's to stop, unless QuitNative:
//     then it is quit like a classic one, on the same rule.
//   - A pod with restartPolicy Always is not a run-to-completion pod and is
//     ignored whatever its containers say; the bridge does not even watch
//     it.
//   - An app that never started (an image that cannot be pulled) is "not
//     terminated": istio-aux waits, as the kubelet keeps trying. Deadlines
//     (activeDeadlineSeconds, a Job's) end such a pod by killing every
//     container, proxy included, and a finished pod is ignored. A Job's
//     podFailurePolicy reads exit codes once the pod has failed, which the
//     quit allows; the proxy exits 0 after a quit.
func Decide(p *slim.Pod, opts Options) Decision {
	if CNIRaced(p) {
		return Decision{Replace, ReasonCNIRace}
	}
	native := HasNativeProxy(p)
	if native && !opts.QuitNative {
		return Decision{Ignore, ReasonNativeSidecar}
	}
	if !native && !HasClassicProxy(p) {
		return Decision{Ignore, ReasonNoProxy}
	}
	if p.DeletionTimestamp != nil {
		return Decision{Ignore, ReasonDeleting}
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return Decision{Ignore, ReasonFinished}
	}
	if s := p.ContainerStatus(keys.ProxyContainer, native); s != nil && s.State.Terminated != nil {
		return Decision{Ignore, ReasonProxyDone}
	}
	if !RunsToCompletion(p.Spec.RestartPolicy) {
		return Decision{Ignore, ReasonRestartAlways}
	}
	sidecars := Sidecars(p, opts)
	apps := 0
	again := Decision{}
	for _, c := range p.Spec.Containers {
		if _, ok := sidecars[c.Name]; ok {
			continue
		}
		apps++
		s := p.ContainerStatus(c.Name, false)
		if s == nil || s.State.Terminated == nil {
			// Not started, waiting (a crash-loop back-off between attempts
			// included) or running.
			return Decision{Wait, ReasonAppsRunning}
		}
		switch WillRestart(c, p.Spec.RestartPolicy, s.State.Terminated.ExitCode, opts.Kubelet) {
		case RestartAll:
			again = Decision{Wait, ReasonRestartAll}
		case RestartContainer:
			if again.Reason == "" {
				again = Decision{Wait, ReasonAppWillRestart}
			}
		}
	}
	if apps == 0 {
		return Decision{Ignore, ReasonNoApps}
	}
	if again.Reason != "" {
		return again
	}
	return Decision{Quit, ReasonAppsDone}
}

// CNIRaced reports whether the pod met Istio CNI's start race and can never
// start: its sandbox was made on a node whose CNI agent had not chained
// Istio's plugin in yet, so its traffic is not captured, and Istio's check,
// the init container istio-validation, failed for that
// (keys.ValidationFailedCode, in its state or, waiting to run again, its
// last state). Under restartPolicy OnFailure the kubelet runs it again and
// again in the same sandbox, which nothing on the pod changes, and every
// run counts toward its Job's backoffLimit; deleting the pod costs its Job
// one failure, as under Never, where the pod fails by itself (so a Never
// pod is not raced here: it is the kubelet's to fail). A pod whose check
// is running again is left to it: Istio's repair controller may have set
// the capture up meanwhile. Only a Pending pod, not being deleted.
func CNIRaced(p *slim.Pod) bool {
	if p.Spec.RestartPolicy != corev1.RestartPolicyOnFailure || p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil {
		return false
	}
	s := p.ContainerStatus(keys.ValidationContainer, true)
	if s == nil {
		return false
	}
	if t := s.State.Terminated; t != nil {
		return t.ExitCode == keys.ValidationFailedCode
	}
	return s.State.Running == nil && s.LastState.Terminated != nil && s.LastState.Terminated.ExitCode == keys.ValidationFailedCode
}

// DecideForAnyKubelet is Decide for a pod whose node's kubelet is not known
// (the bridge's change filter): Quit if some kubelet istio-aux supports
// would let the quit go ahead, so that what is published is never less
// than what the function, which reads the node, decides; else Decide with
// the newest kubelet. For a pod whose kubelet does not matter
// (KubeletMatters) it is Decide.
func DecideForAnyKubelet(p *slim.Pod, opts Options) Decision {
	if !KubeletMatters(p) {
		return Decide(p, opts)
	}
	for _, k := range Kubelets {
		o := opts
		o.Kubelet = k
		if d := Decide(p, o); d.Outcome == Quit {
			return d
		}
	}
	opts.Kubelet = Kubelet{}
	return Decide(p, opts)
}

// Sidecars are the names of the pod's containers that are not apps:
// istio-proxy, the configured extra sidecars and the pod's own annotated
// ones (at most slim.MaxSidecars). Decide reads it; kubectl istio-aux
// explain too, so that it lists the apps Decide waits for.
func Sidecars(p *slim.Pod, opts Options) map[string]struct{} {
	named := p.AnnotatedSidecars()
	set := make(map[string]struct{}, 1+len(opts.ExtraSidecars)+len(named))
	set[keys.ProxyContainer] = struct{}{}
	for _, n := range opts.ExtraSidecars {
		set[n] = struct{}{}
	}
	for _, n := range named {
		set[n] = struct{}{}
	}
	return set
}

// HasClassicProxy reports whether istio-proxy runs as a regular container.
func HasClassicProxy(p *slim.Pod) bool {
	return slices.ContainsFunc(p.Spec.Containers, func(c slim.Container) bool { return c.Name == keys.ProxyContainer })
}

// HasNativeProxy reports whether istio-proxy is a native sidecar (an init
// container with restartPolicy Always), which the kubelet stops by itself.
func HasNativeProxy(p *slim.Pod) bool {
	return slices.ContainsFunc(p.Spec.InitContainers, func(c slim.Container) bool {
		return IsNativeProxy(c.Name, c.RestartPolicy)
	})
}

// RunsToCompletion reports whether a pod with this restartPolicy runs its
// containers to an end (Never, OnFailure): the only pods whose proxy
// istio-aux quits. The API server defaults an empty policy to Always.
func RunsToCompletion(policy corev1.RestartPolicy) bool {
	return policy == corev1.RestartPolicyNever || policy == corev1.RestartPolicyOnFailure
}

// IsNativeProxy reports whether an init container with this name and
// restart policy is a native istio-proxy.
func IsNativeProxy(name string, policy *corev1.ContainerRestartPolicy) bool {
	return name == keys.ProxyContainer && policy != nil && *policy == corev1.ContainerRestartPolicyAlways
}

// MaxSidecarsLen bounds the length of the sidecars setting: room for
// slim.MaxSidecars container names of the longest kind (63 characters), each
// with its comma and a blank or a line break, twice over. Past it the value
// is refused before it is split, so a 1 MiB value costs nothing.
const MaxSidecarsLen = 2 * slim.MaxSidecars * (validation.DNS1123LabelMaxLength + 2)

// ParseSidecars reads a comma-separated list of extra sidecar container
// names (the sidecars setting of ConfigMap config-istio-aux), trimming
// blanks and dropping empty items and repeats. A name that cannot be a
// container name is an error, so a typo is seen at once; so are more than
// slim.MaxSidecars names (the bound of a pod's istio-aux.dev/sidecars
// annotation) and a value longer than MaxSidecarsLen: every decision reads
// the list, and an unbounded one made each cost milliseconds.
func ParseSidecars(s string) ([]string, error) {
	if len(s) > MaxSidecarsLen {
		return nil, fmt.Errorf("%d bytes, more than %d: at most %d names are read", len(s), MaxSidecarsLen, slim.MaxSidecars)
	}
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" || slices.Contains(out, item) {
			continue
		}
		if errs := validation.IsDNS1123Label(item); len(errs) > 0 {
			return nil, fmt.Errorf("sidecar name %q is not a container name: %s", item, strings.Join(errs, "; "))
		}
		if len(out) == slim.MaxSidecars {
			return nil, fmt.Errorf("more than %d names, the most istio-aux reads (as in a pod's %s annotation)", slim.MaxSidecars, keys.AnnotationSidecars)
		}
		out = append(out, item)
	}
	return out, nil
}
