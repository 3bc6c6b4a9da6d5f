package explain_test

import (
	"encoding/json"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// now is the clock of every test: the pods were created ten minutes
// before it.
var (
	now     = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	created = now.Add(-10 * time.Minute)
)

const sys = "istio-aux"

var (
	optedIn = map[string]string{"istio-aux.dev/enabled": "true"}
	byPods  = map[string]string{"istio-aux.dev/enabled": "pods"}
)

// namespace is a namespace with labels; labelledAt, when set, is when a
// manager last wrote its opt-in label (its managedFields).
func namespace(name string, labels map[string]string, labelledAt time.Time) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if !labelledAt.IsZero() {
		fields := map[string]any{"f:metadata": map[string]any{"f:labels": map[string]any{"f:istio-aux.dev/enabled": map[string]any{}}}}
		raw, _ := json.Marshal(fields)
		ns.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl-label", Operation: metav1.ManagedFieldsOperationUpdate,
			Time: &metav1.Time{Time: labelledAt}, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}}}
	}
	return ns
}

// state is a container state.
type state = corev1.ContainerState

func running() state { return state{Running: &corev1.ContainerStateRunning{}} }
func waiting(reason string) state {
	return state{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
}
func exited(code int32, ago time.Duration) state {
	return state{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.NewTime(now.Add(-ago))}}
}

// podOpt shapes a test pod.
type podOpt func(*corev1.Pod)

// jobPod is a Job's pod in namespace ns: app "train" in the given state,
// and a classic istio-proxy injected with the hold (first, with its
// postStart wait, the annotation the webhook adds), running.
func jobPod(ns, name string, policy corev1.RestartPolicy, app state, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), CreationTimestamp: metav1.NewTime(created),
			Labels:      map[string]string{keys.LabelWatched: "true"},
			Annotations: map[string]string{"proxy.istio.io/config": "holdApplicationUntilProxyStarts: true"}},
		Spec: corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{
			{Name: "istio-proxy", Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
				Exec: &corev1.ExecAction{Command: []string{"pilot-agent", "wait"}}}}},
			{Name: "train"},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "istio-proxy", State: running()},
			{Name: "train", State: app},
		}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// unwatched: the webhook did not label the pod keys.LabelWatched.
func unwatched(p *corev1.Pod) { delete(p.Labels, keys.LabelWatched) }

// noHold: Istio injected the proxy last, without the hold, and the pod has
// no hold annotation (config, when set, is its proxy.istio.io/config).
func noHold(config string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{{Name: "train"}, {Name: "istio-proxy"}}
		delete(p.Annotations, "proxy.istio.io/config")
		if config != "" {
			p.Annotations["proxy.istio.io/config"] = config
		}
	}
}

// native: istio-proxy is a native sidecar, as Istio injects it for
// sidecar.istio.io/nativeSidecar: "true".
func native(proxy state) podOpt {
	return func(p *corev1.Pod) {
		p.Annotations = map[string]string{"sidecar.istio.io/nativeSidecar": "true"}
		p.Spec.Containers = []corev1.Container{{Name: "train"}}
		p.Spec.InitContainers = []corev1.Container{{Name: "istio-proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
		p.Status.ContainerStatuses = p.Status.ContainerStatuses[1:]
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "istio-proxy", State: proxy}}
	}
}

// noProxy: Istio injected nothing.
func noProxy(p *corev1.Pod) {
	p.Annotations = nil
	p.Spec.Containers = p.Spec.Containers[1:]
	p.Status.ContainerStatuses = p.Status.ContainerStatuses[1:]
}

// finished: the pod Succeeded after its proxy was quit.
func finished(p *corev1.Pod) {
	p.Status.Phase = corev1.PodSucceeded
	p.Status.ContainerStatuses[0].State = exited(0, 50*time.Second)
}

func labelled(labels map[string]string) podOpt { return func(p *corev1.Pod) { p.Labels = labels } }

func annotated(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func sidecar(name string, s state) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name})
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: name, State: s})
	}
}

// event is one of the function's Events on pod p, its reporter in both
// fields as the function writes it (functions/proxyquit's
// TestEventsNameTheFunction).
func event(p *corev1.Pod, reason, message string, ago time.Duration) *corev1.Event {
	typ := corev1.EventTypeNormal
	if reason == "ProxyQuitFailed" {
		typ = corev1.EventTypeWarning
	}
	at := metav1.NewTime(now.Add(-ago))
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name + "." + reason + at.Format("150405")},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Reason:         reason, Message: message, Type: typ, Count: 1, FirstTimestamp: at, LastTimestamp: at,
		Source: corev1.EventSource{Component: names.SourceProxyQuit}, ReportingController: names.SourceProxyQuit,
	}
}

// forged is ev as another writer put it on the pod: the function's reason,
// with reportingController and source.component as given (the
// events.k8s.io API writes the first; client-go's recorder both).
func forged(ev *corev1.Event, controller, component string) *corev1.Event {
	ev.Name += ".forged"
	ev.ReportingController, ev.Source = controller, corev1.EventSource{Component: component}
	return ev
}

// install is a healthy webhook: its configuration as config/ has it, two
// ready endpoints and a pod running since an hour before the test pods,
// and config-istio-aux with data.
func install(data map[string]string) []runtime.Object {
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-webhook"},
		Webhooks: admission.Webhooks(sys, admissionregistrationv1.WebhookClientConfig{})}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "istio-aux-webhook-abcde",
		Labels: map[string]string{discoveryv1.LabelServiceName: "istio-aux-webhook"}},
		Endpoints: []discoveryv1.Endpoint{{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}, {}}}
	return []runtime.Object{mwc, slice, webhookPod(created.Add(-time.Hour)),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "config-istio-aux"}, Data: data}}
}

func webhookPod(started time.Time) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "istio-aux-webhook-" + started.Format("150405"),
		Labels: map[string]string{"app.kubernetes.io/component": "webhook"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: started}}}
}
