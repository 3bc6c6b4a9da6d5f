package record

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

func TestState(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	exited := func(code int32) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}
	}
	cs := func(name string, st corev1.ContainerState, ready bool, restarts int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: st, Ready: ready, RestartCount: restarts}
	}
	classic := func(policy corev1.RestartPolicy, statuses ...corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: policy}, Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: statuses}}
		for _, s := range statuses {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: s.Name})
		}
		return p
	}
	withInit := func(p *corev1.Pod, name string, st corev1.ContainerState, always bool) *corev1.Pod {
		c := corev1.Container{Name: name}
		if always {
			c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, cs(name, st, false, 0))
		return p
	}
	deleting := classic(corev1.RestartPolicyNever, cs("istio-proxy", running, true, 0), cs("app", running, true, 0))
	deleting.DeletionTimestamp = &metav1.Time{}
	succeeded := classic(corev1.RestartPolicyNever)
	succeeded.Status.Phase = corev1.PodSucceeded

	cases := map[string]struct {
		pod       *corev1.Pod
		eventType string
		want      string
	}{
		"delete event":      {pod: succeeded, eventType: podevent.TypeAPIServerDelete, want: StateDeleted},
		"deleting":          {pod: deleting, want: StateDeleting},
		"succeeded":         {pod: succeeded, want: StateSucceeded},
		"no statuses":       {pod: classic(corev1.RestartPolicyNever), want: StatePending},
		"init running":      {pod: withInit(classic(corev1.RestartPolicyNever, cs("istio-proxy", waiting, false, 0)), "istio-init", running, false), want: StateInit},
		"podinitializing":   {pod: classic(corev1.RestartPolicyNever, cs("istio-proxy", waiting, false, 0), cs("app", waiting, false, 0)), want: StatePodInitializing},
		"proxy up":          {pod: classic(corev1.RestartPolicyNever, cs("istio-proxy", running, true, 0), cs("app", waiting, false, 0)), want: "1of2"},
		"all up, restarted": {pod: classic(corev1.RestartPolicyOnFailure, cs("istio-proxy", running, true, 0), cs("app", running, true, 2)), want: "2of2-restart2"},
		"one of two apps":   {pod: classic(corev1.RestartPolicyNever, cs("istio-proxy", running, true, 0), cs("a", exited(0), false, 0), cs("b", running, true, 0)), want: "a-exited0"},
		"apps done":         {pod: classic(corev1.RestartPolicyNever, cs("istio-proxy", running, true, 0), cs("app", exited(1), false, 0)), want: StateAppsDone},
		"onfailure failed":  {pod: classic(corev1.RestartPolicyOnFailure, cs("istio-proxy", running, true, 0), cs("app", exited(1), false, 0)), want: StateAppFailed},
		"proxy exited":      {pod: classic(corev1.RestartPolicyNever, cs("istio-proxy", exited(0), false, 0), cs("app", exited(0), false, 0)), want: StateProxyExited},
		"native apps done":  {pod: withInit(classic(corev1.RestartPolicyNever, cs("app", exited(0), false, 0)), "istio-proxy", running, true), want: StateAppsDone},
		"native proxy done": {pod: withInit(classic(corev1.RestartPolicyNever, cs("app", exited(0), false, 0)), "istio-proxy", exited(0), true), want: StateProxyExited},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			typ := tc.eventType
			if typ == "" {
				typ = podevent.TypePodUpdated
			}
			if got := State(slim.Of(tc.pod), typ); got != tc.want {
				t.Errorf("State = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFileNameRoundTrip(t *testing.T) {
	name := FileName(7, "mnist-worker-0", "2of2-restart1")
	if name != "007-mnist-worker-0-2of2-restart1.json" {
		t.Fatalf("FileName = %q", name)
	}
	if st, ok := StateFromFileName(name, "mnist-worker-0"); !ok || st != "2of2-restart1" {
		t.Errorf("StateFromFileName = %q, %v", st, ok)
	}
	if _, ok := StateFromFileName(name, "mnist-worker-1"); ok {
		t.Error("StateFromFileName accepted another pod's file")
	}
}
