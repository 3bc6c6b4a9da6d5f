package filter

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/functions/decision"
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

var optedIn = map[string]string{decision.LabelEnabled: "true"}

func TestEvaluate(t *testing.T) {
	done := pod(corev1.RestartPolicyNever, exited(0))
	doneFP := Fingerprint(done)
	cases := map[string]struct {
		mode    Mode
		in      Input
		publish bool
		reason  string
	}{
		"quit, first time": {
			mode: ModeQuit, in: Input{Pod: done, NamespaceLabels: optedIn}, publish: true, reason: ReasonPublish},
		"quit, already published": {
			mode: ModeQuit, in: Input{Pod: done, NamespaceLabels: optedIn, Last: doneFP, HasLast: true}, reason: ReasonUnchanged},
		"quit, only resourceVersion and readiness changed": {
			mode: ModeQuit, in: Input{Pod: pod(corev1.RestartPolicyNever, exited(0), func(p *corev1.Pod) {
				p.ResourceVersion = "2"
				p.Status.ContainerStatuses[0].Ready = true
				p.Labels = map[string]string{"x": "y"}
			}), NamespaceLabels: optedIn, Last: doneFP, HasLast: true}, reason: ReasonUnchanged},
		"quit after a different published state": {
			mode: ModeQuit, in: Input{Pod: done, NamespaceLabels: optedIn, Last: Fingerprint(pod(corev1.RestartPolicyNever, running())), HasLast: true},
			publish: true, reason: ReasonPublish},
		"namespace not opted in": {
			mode: ModeQuit, in: Input{Pod: done}, reason: ReasonOptedOut},
		"legacy namespace label": {
			mode: ModeQuit, in: Input{Pod: done, NamespaceLabels: map[string]string{decision.LegacyLabel: decision.LegacyLabelValue}},
			publish: true, reason: ReasonPublish},
		"pod annotation opts out": {
			mode: ModeQuit, in: Input{Pod: pod(corev1.RestartPolicyNever, exited(0), func(p *corev1.Pod) {
				p.Annotations = map[string]string{decision.AnnotationEnabled: "false"}
			}), NamespaceLabels: optedIn}, reason: ReasonOptedOut},
		"pod label opts in without namespace": {
			mode: ModeQuit, in: Input{Pod: pod(corev1.RestartPolicyNever, exited(0), func(p *corev1.Pod) {
				p.Labels = map[string]string{decision.LabelEnabled: "true"}
			})}, publish: true, reason: ReasonPublish},
		"app running: quit mode stays quiet": {
			mode: ModeQuit, in: Input{Pod: pod(corev1.RestartPolicyNever, running()), NamespaceLabels: optedIn}, reason: ReasonWaiting},
		"app running: changes mode publishes": {
			mode: ModeChanges, in: Input{Pod: pod(corev1.RestartPolicyNever, running()), NamespaceLabels: optedIn}, publish: true, reason: ReasonPublish},
		"OnFailure app failed: waits for the retry": {
			mode: ModeQuit, in: Input{Pod: pod(corev1.RestartPolicyOnFailure, exited(1)), NamespaceLabels: optedIn}, reason: ReasonWaiting},
		"OnFailure app succeeded": {
			mode: ModeQuit, in: Input{Pod: pod(corev1.RestartPolicyOnFailure, exited(0)), NamespaceLabels: optedIn}, publish: true, reason: ReasonPublish},
		"restartPolicy Always is ignored even in changes mode": {
			mode: ModeChanges, in: Input{Pod: pod(corev1.RestartPolicyAlways, exited(0)), NamespaceLabels: optedIn}, reason: ReasonIgnored},
		"pod being deleted": {
			mode: ModeQuit, in: Input{Pod: pod(corev1.RestartPolicyNever, exited(0), func(p *corev1.Pod) {
				p.DeletionTimestamp = &metav1.Time{}
			}), NamespaceLabels: optedIn}, reason: ReasonIgnored},
		"no istio-proxy": {
			mode: ModeQuit, in: Input{Pod: pod(corev1.RestartPolicyNever, exited(0), func(p *corev1.Pod) {
				p.Spec.Containers = p.Spec.Containers[1:]
			}), NamespaceLabels: optedIn}, reason: ReasonIgnored},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := Evaluate(tc.mode, decision.Options{}, tc.in)
			if v.Publish != tc.publish || v.Reason != tc.reason {
				t.Errorf("Evaluate = publish %v reason %q (decision %v), want %v %q", v.Publish, v.Reason, v.Decision, tc.publish, tc.reason)
			}
			if v.Publish && v.Fingerprint != Fingerprint(tc.in.Pod) {
				t.Error("verdict does not carry the pod's fingerprint")
			}
		})
	}
}

func TestFingerprintChanges(t *testing.T) {
	base := pod(corev1.RestartPolicyOnFailure, exited(1))
	cases := map[string]struct {
		mutate  func(*corev1.Pod)
		changed bool
	}{
		"nothing":              {func(*corev1.Pod) {}, false},
		"resourceVersion":      {func(p *corev1.Pod) { p.ResourceVersion = "9" }, false},
		"readiness":            {func(p *corev1.Pod) { p.Status.ContainerStatuses[0].Ready = true }, false},
		"unrelated annotation": {func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "b"} }, false},
		"phase":                {func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
		"deletion":             {func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }, true},
		"exit code":            {func(p *corev1.Pod) { p.Status.ContainerStatuses[1].State = exited(2) }, true},
		"state kind":           {func(p *corev1.Pod) { p.Status.ContainerStatuses[1].State = running() }, true},
		"restart count":        {func(p *corev1.Pod) { p.Status.ContainerStatuses[1].RestartCount = 1 }, true},
		"sidecars annotation": {func(p *corev1.Pod) {
			p.Annotations = map[string]string{decision.AnnotationSidecars: "app"}
		}, true},
		"init container state": {func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: exited(0)}}
		}, true},
		"native sidecar": {func(p *corev1.Pod) {
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers = []corev1.Container{{Name: "istio-proxy", RestartPolicy: &always}}
		}, true},
	}
	want := Fingerprint(base)
	for name, tc := range cases {
		p := base.DeepCopy()
		tc.mutate(p)
		if got := Fingerprint(p) != want; got != tc.changed {
			t.Errorf("%s: fingerprint changed = %v, want %v", name, got, tc.changed)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeQuit, "quit": ModeQuit, "changes": ModeChanges} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseMode("all"); err == nil {
		t.Error("ParseMode accepted an unknown mode")
	}
}
