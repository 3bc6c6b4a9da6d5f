package explain

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/webhook/admission"
	"github.com/istio-aux/istio-aux/webhook/proxyconfig"
)

// hold works out whether the app waits for its proxy at start and, if it
// does not, the likely cause. The hold is read from what Istio injected,
// not from the annotation alone: only the injected spec makes the app wait.
func (e *explanation) hold() {
	p := e.in.Pod
	switch {
	case e.out.Proxy == ProxyNative:
		e.out.Hold = Hold{Present: true, How: HowNative,
			Text: "yes: istio-proxy is a native sidecar (an init container with restartPolicy Always), which the kubelet starts before the apps"}
		return
	case e.out.Proxy == ProxyNone:
		e.out.Hold = Hold{Cause: CauseNoProxy, Text: "no sidecar: Istio injected no istio-proxy (is the namespace labelled " +
			keys.LabelInjection + "=enabled or istio.io/rev? does the pod say " + keys.KeyInject + "=false?), so there is nothing to hold or quit"}
		return
	case proxyFirstWithWait(p):
		text := "yes: Istio put istio-proxy first, with a postStart `pilot-agent wait`"
		if hold, _, _ := proxyconfig.IstioHold(p.Annotations[keys.AnnotationProxyConfig]); !hold {
			text += " (the mesh's own setting: the pod's " + keys.AnnotationProxyConfig + " does not ask for it)"
		}
		e.out.Hold = Hold{Present: true, How: HowProxyFirst, Text: text}
		return
	}
	cause, text, checks := e.missingHold()
	e.out.Hold = Hold{Cause: cause, Text: "no: " + text}
	if e.opt.OptedIn && cause != CauseUserValue {
		e.problem("admitted without the hold (its app may start before its proxy carries traffic): "+text, checks...)
	}
}

// proxyFirstWithWait reports whether istio-proxy is the first container and
// holds the next one in its postStart hook with `pilot-agent wait`: what
// Istio injects for the hold.
func proxyFirstWithWait(p *corev1.Pod) bool {
	if len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Name != keys.ProxyContainer {
		return false
	}
	h := p.Spec.Containers[0].Lifecycle
	if h == nil || h.PostStart == nil || h.PostStart.Exec == nil || len(h.PostStart.Exec.Command) < 2 {
		return false
	}
	cmd := h.PostStart.Exec.Command
	return path.Base(cmd[0]) == "pilot-agent" && slices.Contains(cmd[1:], "wait")
}

// missingHold is the likely cause of a classic proxy without the hold. The
// webhook's own Mutate, run on the pod as it is now, says whether it would
// add the hold: if not, why not (the user's value, a config it cannot
// rewrite); if so, it was not called, or not in time, when the pod was
// created, and the cluster's state says why that is likely.
func (e *explanation) missingHold() (cause, text string, checks []string) {
	if !e.opt.OptedIn {
		return CauseNotOptedIn, "the pod is not opted in, so the webhook leaves it alone", nil
	}
	wp, err := webhookPod(e.in.Pod)
	if err != nil {
		return CauseWebhookNotCalled, "the pod could not be read as the webhook reads it: " + err.Error(), nil
	}
	m := admission.Mutate(wp, e.nsLabels, e.in.Config.Mode)
	switch m.Outcome {
	case admission.Warned:
		return CauseMalformedConfig, "the webhook does not add the hold: " + strings.TrimPrefix(m.Warning, admission.WarningPrefix), nil
	case admission.Skipped:
		cause, text := e.skipped(m.Reason)
		return cause, text, nil
	}
	return e.notMutated()
}

// webhookPod is the pod as the webhook decodes it from an admission review.
func webhookPod(p *corev1.Pod) (*admission.Pod, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	var wp admission.Pod
	if err := json.Unmarshal(raw, &wp); err != nil {
		return nil, fmt.Errorf("decoding pod %s/%s as the webhook does: %w", p.Namespace, p.Name, err)
	}
	return &wp, nil
}

// skipped explains a Mutate that skips the pod (the opt-in and the native
// proxy cases are settled before it is called).
func (e *explanation) skipped(reason string) (cause, text string) {
	a := e.in.Pod.Annotations
	switch reason {
	case admission.ReasonUserHold:
		if hold, _, _ := proxyconfig.IstioHold(a[keys.AnnotationProxyConfig]); hold {
			return CauseNotApplied, fmt.Sprintf("%s asks for %s: true, but istio-proxy is not first with a postStart `pilot-agent wait`: "+
				"Istio did not apply it (a sidecar injected before the annotation was set, e.g. by istioctl kube-inject, or an Istio older than 1.8)",
				keys.AnnotationProxyConfig, proxyconfig.KeyHold)
		}
		return CauseUserValue, fmt.Sprintf("the pod's own %s sets %s: false, and the webhook never overrides a value its user set",
			keys.AnnotationProxyConfig, proxyconfig.KeyHold)
	case admission.ReasonUserNative:
		if v := a[keys.AnnotationNativeSidecar]; strings.EqualFold(strings.TrimSpace(v), "true") {
			return CauseNotApplied, fmt.Sprintf("%s=%q asks for a native sidecar, but Istio injected a classic one (an Istio older than 1.24, or a Kubernetes without sidecar containers)",
				keys.AnnotationNativeSidecar, v)
		}
		return CauseUserValue, fmt.Sprintf("the pod's own %s=%q wins over mode native: the webhook never overrides a value its user set",
			keys.AnnotationNativeSidecar, a[keys.AnnotationNativeSidecar])
	case admission.ReasonNoInjection:
		return CauseNotApplied, "the webhook skips a pod Istio will not inject (" + keys.KeyInject + " or hostNetwork), yet this one has an istio-proxy, injected some other way"
	}
	return CauseWebhookNotCalled, "the webhook skips it now: " + reason
}
