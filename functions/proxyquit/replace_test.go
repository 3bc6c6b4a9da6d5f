package proxyquit

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// racedPod is an OnFailure pod of Job train that Istio CNI's start race
// left unable to start: istio-validation exited 126 and waits to run
// again in the same sandbox; no app has run.
func racedPod(name, uid string) *corev1.Pod {
	p := podSpec{name: name, uid: uid, policy: corev1.RestartPolicyOnFailure, apps: []string{"app"},
		states: map[string]corev1.ContainerState{"app": {Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}},
		proxy:  corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}.pod()
	p.Status.Phase = corev1.PodPending
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "job-uid", Controller: ptr.To(true)}}
	p.Spec.InitContainers = []corev1.Container{{Name: keys.ValidationContainer}}
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: keys.ValidationContainer, RestartCount: 1,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: keys.ValidationFailedCode}}}}
	return p
}

// TestReplaceCNIRacedPod: a pod the CNI start race left unable to start is
// deleted (by its uid and resourceVersion), with a PodReplaced Event
// naming its Job; nothing is exec'd. Every other way the delete can end
// answers as the quit's would: gone is done, a changed pod is retried, a
// refusal is final and said in an Event, and a pod without a controller
// is left alone.
func TestReplaceCNIRacedPod(t *testing.T) {
	raced := racedPod("train-abc", "uid-1")
	orphan := raced.DeepCopy()
	orphan.OwnerReferences = nil
	repaired := raced.DeepCopy()
	repaired.Status.InitContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	refuse := func(err error) func(*harness) {
		return func(h *harness) {
			h.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
		}
	}
	podsGR := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name     string
		live     *corev1.Pod
		setup    func(*harness)
		wantCode int
		wantOut  Outcome
		deleted  bool
		wantKube string // a substring of the one Event recorded; "" for none
	}{
		{name: "deleted, its Job makes another", live: raced, wantCode: 200, wantOut: OutcomeReplaced, deleted: true,
			wantKube: "Warning PodReplaced Deleted the pod: Istio CNI had not set up the pod's traffic capture when it started (istio-validation exited 126)"},
		{name: "repaired since the event: istio-validation runs again", live: repaired, wantCode: 200, wantOut: OutcomeWait},
		{name: "no controller: left alone", live: orphan, wantCode: 200, wantOut: OutcomeIgnored,
			wantKube: "Warning PodReplaceFailed Istio CNI had not set up the pod's traffic capture: istio-validation exited 126"},
		{name: "changed before the delete: retried", live: raced, setup: refuse(apierrors.NewConflict(podsGR, "train-abc", nil)),
			wantCode: 503, wantOut: OutcomeError},
		{name: "gone before the delete", live: raced, setup: refuse(apierrors.NewNotFound(podsGR, "train-abc")),
			wantCode: 200, wantOut: OutcomeGone},
		{name: "refused by the API server's policy: final, said", live: raced,
			setup:    refuse(apierrors.NewForbidden(podsGR, "train-abc", nil)),
			wantCode: 422, wantOut: OutcomeFailedFinal, wantKube: "Warning PodReplaceFailed Istio CNI had not set up the pod's traffic capture, but istio-aux may not delete the pod"},
		{name: "API server unavailable: retried", live: raced, setup: refuse(apierrors.NewServiceUnavailable("etcd is down")),
			wantCode: 503, wantOut: OutcomeError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig(), optedIn, tc.live)
			if tc.setup != nil {
				tc.setup(h)
			}
			e := newEvent(t, raced)
			res := h.fn.Handle(context.Background(), e)
			if got := codeOf(t, res); got != tc.wantCode {
				t.Errorf("code %d, want %d (%v)", got, tc.wantCode, res)
			}
			if got := h.count(e.Type(), tc.wantOut); got != 1 {
				t.Errorf("outcome %s counted %v times, want once (%v)", tc.wantOut, got, res)
			}
			if calls := h.exec.Calls(); len(calls) != 0 {
				t.Errorf("exec'd %v: a raced pod has nothing to quit", calls)
			}
			_, err := h.client.CoreV1().Pods(testNS).Get(context.Background(), raced.Name, metav1.GetOptions{})
			if gone := apierrors.IsNotFound(err); gone != tc.deleted {
				t.Errorf("pod deleted: %t, want %t (%v)", gone, tc.deleted, err)
			}
			for _, a := range h.client.Actions() {
				if d, ok := a.(k8stesting.DeleteAction); ok {
					pre := d.GetDeleteOptions().Preconditions
					if pre == nil || pre.UID == nil || *pre.UID != raced.UID || pre.ResourceVersion == nil || *pre.ResourceVersion != raced.ResourceVersion {
						t.Errorf("delete without the pod's uid and resourceVersion as preconditions: %+v", pre)
					}
				}
			}
			events := h.events()
			switch {
			case tc.wantKube == "" && len(events) > 0:
				t.Errorf("Events %q, want none", events)
			case tc.wantKube != "" && (len(events) != 1 || !strings.Contains(events[0], tc.wantKube)):
				t.Errorf("Events %q, want one with %q", events, tc.wantKube)
			}
		})
	}
}
