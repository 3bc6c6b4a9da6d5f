package explain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/kubectl/install"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// Selection is which pods of Namespace to explain: the named ones, those a
// label selector matches, or (All) every one.
type Selection struct {
	Namespace string
	Names     []string
	Selector  string
	All       bool
}

// ErrNoPods is a selection that matched no pod.
var ErrNoPods = errors.New("no pods matched")

// Source reads what Explain needs from a cluster: the pods, their
// namespaces and Events, config-istio-aux and the webhook's state. What it
// cannot read (RBAC may hide istio-aux's namespace from the user) becomes a
// note, and the answers assume the defaults; only the pods themselves must
// be readable.
type Source struct {
	Client          kubernetes.Interface
	SystemNamespace string
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Report explains the selected pods, in the order named, or by name.
func (s Source) Report(ctx context.Context, sel Selection) (Report, error) {
	if s.Now == nil {
		s.Now = time.Now
	}
	pods, err := s.pods(ctx, sel)
	if err != nil {
		return Report{}, err
	}
	var notes []string
	note := func(err error) {
		if msg := err.Error(); !slices.Contains(notes, msg) {
			notes = append(notes, msg)
		}
	}
	cfg, err := install.ReadConfig(ctx, s.Client, s.SystemNamespace)
	if err != nil {
		note(fmt.Errorf("%w; assuming no extra sidecars and quit-native off", err))
	}
	wh, err := s.webhook(ctx)
	if err != nil {
		note(err)
	}
	namespaces := map[string]*corev1.Namespace{}
	events := map[string][]corev1.Event{}
	r := Report{}
	for _, p := range pods {
		ns, ok := namespaces[p.Namespace]
		if !ok {
			if ns, err = s.Client.CoreV1().Namespaces().Get(ctx, p.Namespace, metav1.GetOptions{}); err != nil {
				note(fmt.Errorf("reading namespace %s: %w; taking it as unlabelled", p.Namespace, err))
				ns = nil
			}
			namespaces[p.Namespace] = ns
			if events[p.Namespace], err = s.events(ctx, p.Namespace); err != nil {
				note(err)
			}
		}
		podCfg := cfg
		if podCfg.Decision.Kubelet, err = s.kubelet(ctx, p); err != nil {
			note(err)
		}
		r.Pods = append(r.Pods, Explain(Input{Pod: p, Namespace: ns, Events: events[p.Namespace], Config: podCfg,
			Webhook: wh, SystemNamespace: s.SystemNamespace, Now: s.Now()}))
	}
	r.Notes = slices.Concat(notes, cfg.Problems)
	return r, nil
}

// kubelet is the kubelet of p's node, read from the Node only where its
// version can change the decision (decision.KubeletMatters), as the
// function reads it; the newest when it cannot be read, with why.
func (s Source) kubelet(ctx context.Context, p *corev1.Pod) (decision.Kubelet, error) {
	if p.Spec.NodeName == "" || !decision.KubeletMatters(slim.Of(p)) {
		return decision.Kubelet{}, nil
	}
	n, err := s.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return decision.Kubelet{}, fmt.Errorf("reading node %s: %w; deciding as the newest kubelet would", p.Spec.NodeName, err)
	}
	return decision.KubeletOf(n.Status.NodeInfo.KubeletVersion), nil
}

// pods reads the selected pods.
func (s Source) pods(ctx context.Context, sel Selection) ([]*corev1.Pod, error) {
	client := s.Client.CoreV1().Pods(sel.Namespace)
	var out []*corev1.Pod
	if len(sel.Names) > 0 {
		for _, name := range sel.Names {
			p, err := client.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("reading pod %s/%s: %w", sel.Namespace, name, err)
			}
			out = append(out, p)
		}
		return out, nil
	}
	l, err := client.List(ctx, metav1.ListOptions{LabelSelector: sel.Selector})
	if err != nil {
		return nil, fmt.Errorf("listing pods in %s: %w", sel.Namespace, err)
	}
	for i := range l.Items {
		out = append(out, &l.Items[i])
	}
	if len(out) == 0 && sel.Selector != "" {
		return nil, fmt.Errorf("%w selector %s in namespace %s", ErrNoPods, sel.Selector, sel.Namespace)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w in namespace %s", ErrNoPods, sel.Namespace)
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// events are the function's Events in namespace ns: two lists the API
// server filters by reason, not every Event of the namespace.
func (s Source) events(ctx context.Context, ns string) ([]corev1.Event, error) {
	var out []corev1.Event
	for _, reason := range []string{names.ReasonProxyQuit, names.ReasonProxyQuitFailed} {
		l, err := s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", reason).String()})
		if err != nil {
			return nil, fmt.Errorf("listing %s Events in %s: %w", reason, ns, err)
		}
		// Filtered again: a server (or a fake) may ignore the selector.
		for _, ev := range l.Items {
			if ev.Reason == reason {
				out = append(out, ev)
			}
		}
	}
	return out, nil
}

// webhook reads the webhook's configuration, endpoints and pods.
func (s Source) webhook(ctx context.Context) (Webhook, error) {
	w := Webhook{}
	mwc, err := s.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, names.WebhookConfiguration, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return w, fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", names.WebhookConfiguration, err)
	default:
		w.Configuration = mwc
	}
	if w.Endpoints, err = install.WebhookEndpoints(ctx, s.Client, s.SystemNamespace); err != nil {
		return w, err
	}
	pods, err := s.Client.CoreV1().Pods(s.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: names.ComponentLabel + "=" + names.ComponentWebhook})
	if err != nil {
		return w, fmt.Errorf("listing the webhook's pods: %w", err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Status.StartTime != nil &&
			(w.Since.IsZero() || p.Status.StartTime.Time.Before(w.Since)) {
			w.Since = p.Status.StartTime.Time
		}
	}
	w.Read = true
	return w, nil
}
