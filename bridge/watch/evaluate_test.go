package watch

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
}

func exited(code int32) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}
}

// pod is a Job-like pod with an app and a classic istio-proxy.
func pod(policy corev1.RestartPolicy, app corev1.ContainerState, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "1"},
		Spec: corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{
			{Name: "istio-proxy"}, {Name: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "istio-proxy", State: running()}, {Name: "app", State: app}}},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

var optedIn = map[string]string{keys.LabelEnabled: "true"}

// ownPolicy gives the app a restart policy of its own.
func ownPolicy(policy corev1.ContainerRestartPolicy) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[1].RestartPolicy = &policy }
}

func TestEvaluate(t *testing.T) {
	done := pod(corev1.RestartPolicyNever, exited(0))
	doneFP := slim.Fingerprint(slim.Of(done))
	cases := map[string]struct {
		waits   bool
		in      input
		publish bool
		reason  string
	}{
		"quit, first time": {
			in: input{Pod: done, NamespaceLabels: optedIn}, publish: true, reason: ReasonPublish},
		"quit, already published": {
			in: input{Pod: done, NamespaceLabels: optedIn, Last: doneFP, HasLast: true}, reason: ReasonUnchanged},
		"quit, only resourceVersion and readiness changed": {
			in: input{Pod: pod(corev1.RestartPolicyNever, exited(0), func(p *corev1.Pod) {
				p.ResourceVersion = "2"
				p.Status.ContainerStatuses[0].Ready = true
				p.Labels = map[string]string{"x": "y"}
			}), NamespaceLabels: optedIn, Last: doneFP, HasLast: true}, reason: ReasonUnchanged},
		"quit after a different published state": {
			in:      input{Pod: done, NamespaceLabels: optedIn, Last: slim.Fingerprint(slim.Of(pod(corev1.RestartPolicyNever, running()))), HasLast: true},
			publish: true, reason: ReasonPublish},
		"namespace not opted in": {
			in: input{Pod: done}, reason: ReasonOptedOut},
		"legacy namespace label": {
			in:      input{Pod: done, NamespaceLabels: map[string]string{keys.LegacyLabel: keys.LegacyLabelValue}},
			publish: true, reason: ReasonPublish},
		"pod annotation opts out": {
			in: input{Pod: pod(corev1.RestartPolicyNever, exited(0), func(p *corev1.Pod) {
				p.Annotations = map[string]string{keys.AnnotationEnabled: "false"}
			}), NamespaceLabels: optedIn}, reason: ReasonOptedOut},
		"pod label opts in without namespace": {
			in: input{Pod: pod(corev1.RestartPolicyNever, exited(0), func(p *corev1.Pod) {
				p.Labels = map[string]string{keys.LabelEnabled: "true"}
			})}, publish: true, reason: ReasonPublish},
		"app running: quit mode stays quiet": {
			in: input{Pod: pod(corev1.RestartPolicyNever, running()), NamespaceLabels: optedIn}, reason: ReasonWaiting},
		"app running: published when waits are": {
			waits: true, in: input{Pod: pod(corev1.RestartPolicyNever, running()), NamespaceLabels: optedIn}, publish: true, reason: ReasonPublish},
		"OnFailure app failed: waits for the retry": {
			in: input{Pod: pod(corev1.RestartPolicyOnFailure, exited(1)), NamespaceLabels: optedIn}, reason: ReasonWaiting},
		"OnFailure app succeeded": {
			in: input{Pod: pod(corev1.RestartPolicyOnFailure, exited(0)), NamespaceLabels: optedIn}, publish: true, reason: ReasonPublish},
		"restartPolicy Always is ignored even when waits are published": {
			waits: true, in: input{Pod: pod(corev1.RestartPolicyAlways, exited(0)), NamespaceLabels: optedIn}, reason: ReasonIgnored},
		"pod being deleted": {
			in: input{Pod: pod(corev1.RestartPolicyNever, exited(0), func(p *corev1.Pod) {
				p.DeletionTimestamp = &metav1.Time{}
			}), NamespaceLabels: optedIn}, reason: ReasonIgnored},
		// The node's kubelet is not known here: what some supported kubelet
		// quits is published, and the function decides on the node's.
		"app's own Always under pod Never, exit 0: a kubelet before 1.35 runs it no more": {
			in:      input{Pod: pod(corev1.RestartPolicyNever, exited(0), ownPolicy(corev1.ContainerRestartPolicyAlways)), NamespaceLabels: optedIn},
			publish: true, reason: ReasonPublish},
		"app's own Never under pod OnFailure, exit 1: a kubelet from 1.35 runs it no more": {
			in:      input{Pod: pod(corev1.RestartPolicyOnFailure, exited(1), ownPolicy(corev1.ContainerRestartPolicyNever)), NamespaceLabels: optedIn},
			publish: true, reason: ReasonPublish},
		"app's own OnFailure under pod Never, exit 1: a kubelet before 1.35 runs it no more": {
			in:      input{Pod: pod(corev1.RestartPolicyNever, exited(1), ownPolicy(corev1.ContainerRestartPolicyOnFailure)), NamespaceLabels: optedIn},
			publish: true, reason: ReasonPublish},
		"no istio-proxy": {
			in: input{Pod: pod(corev1.RestartPolicyNever, exited(0), func(p *corev1.Pod) {
				p.Spec.Containers = p.Spec.Containers[1:]
			}), NamespaceLabels: optedIn}, reason: ReasonIgnored},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			packed := Pack(slim.Of(tc.in.Pod))
			in := Input{Pod: packed.Unpack(), Fingerprint: packed.Fingerprint(), NamespaceLabels: tc.in.NamespaceLabels, Last: tc.in.Last, HasLast: tc.in.HasLast}
			v := Evaluate(decision.Options{}, tc.waits, in)
			if v.Publish != tc.publish || v.Reason != tc.reason {
				t.Errorf("Evaluate = publish %v reason %q (decision %v), want %v %q", v.Publish, v.Reason, v.Decision, tc.publish, tc.reason)
			}
			if v.Publish && v.Fingerprint != slim.Fingerprint(slim.Of(tc.in.Pod)) {
				t.Error("verdict does not carry the pod's fingerprint")
			}
		})
	}
}

// input is an Input with a full pod, packed by the test as the cache does.
type input struct {
	Pod             *corev1.Pod
	NamespaceLabels map[string]string
	Last            uint64
	HasLast         bool
}
