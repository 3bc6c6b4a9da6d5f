package explain

import (
	"maps"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/kubectl/install"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// Input is everything Explain reads about one pod (gather.go reads it from
// the cluster).
type Input struct {
	Pod *corev1.Pod
	// Namespace is the pod's; nil when it could not be read (no labels).
	Namespace *corev1.Namespace
	// Events are the pod's Events; Explain keeps istio-aux's.
	Events []corev1.Event
	// Config is config-istio-aux as the components read it.
	Config  install.Config
	Webhook Webhook
	// SystemNamespace is where istio-aux runs (for the commands shown).
	SystemNamespace string
	Now             time.Time
}

// Webhook is what the cluster says about the webhook now, from which a
// missing hold's cause is guessed.
type Webhook struct {
	// Read is false when it could not be read: no cause then blames it.
	Read bool
	// Configuration is the live MutatingWebhookConfiguration; nil when
	// there is none.
	Configuration *admissionregistrationv1.MutatingWebhookConfiguration
	Endpoints     install.Endpoints
	// Since is when the oldest webhook pod still running started; zero
	// when none runs.
	Since time.Time
}

// Explain explains one pod. It is a pure function of in.
func Explain(in Input) Pod {
	e := &explanation{in: in, pod: slim.Of(in.Pod), nsLabels: namespaceLabels(in.Namespace, in.Pod.Namespace)}
	// Empty lists, not null, in JSON: scripts iterate them.
	e.out = Pod{Namespace: in.Pod.Namespace, Name: in.Pod.Name, Proxy: proxyKind(e.pod), Apps: []App{}, Events: istioAuxEvents(in.Events, in.Pod)}
	e.optIn()
	e.hold()
	e.decide()
	e.apps()
	e.next()
	e.cni()
	e.events()
	e.verdict()
	return e.out
}

// explanation is one Explain under way: its input, what it has worked out
// so far, and the report it fills.
type explanation struct {
	in       Input
	pod      *slim.Pod
	nsLabels map[string]string
	opt      decision.OptIn
	d        decision.Decision
	out      Pod
}

func (e *explanation) problem(text string, checks ...string) {
	e.out.Problems = append(e.out.Problems, text)
	e.check(checks...)
}

func (e *explanation) check(commands ...string) {
	for _, c := range commands {
		if !slices.Contains(e.out.Checks, c) {
			e.out.Checks = append(e.out.Checks, c)
		}
	}
}

// namespaceLabels are ns's labels with kubernetes.io/metadata.name, which
// the API server sets on every namespace and the webhook's selectors read.
func namespaceLabels(ns *corev1.Namespace, name string) map[string]string {
	out := map[string]string{}
	if ns != nil {
		maps.Copy(out, ns.Labels)
	}
	out[corev1.LabelMetadataName] = name
	return out
}

// proxyKind is the kind of the pod's istio-proxy.
func proxyKind(p *slim.Pod) string {
	switch {
	case decision.HasNativeProxy(p):
		return ProxyNative
	case decision.HasClassicProxy(p):
		return ProxyClassic
	}
	return ProxyNone
}
