package explain_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/kubectl/explain"
)

// TestExplainCNIStartRace: a pod whose istio-validation failed (Istio CNI
// had not set up its traffic capture: its node's CNI agent was not ready)
// is a problem that names the cause and what happens next, by restart
// policy and controller; once istio-validation passes (the repair controller's work), it
// is not.
func TestExplainCNIStartRace(t *testing.T) {
	validation := func(current, last corev1.ContainerState, phase corev1.PodPhase) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.NodeName = "node-1"
			p.Spec.InitContainers = []corev1.Container{{Name: "istio-validation"}}
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "istio-validation", State: current, LastTerminationState: last}}
			p.Status.Phase = phase
			p.Status.ContainerStatuses[0].State = waiting("PodInitializing")
			p.Status.ContainerStatuses[1].State = waiting("PodInitializing")
		}
	}
	ownedByJob := func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "j", Controller: ptr.To(true)}}
	}
	both := func(a, b podOpt) podOpt { return func(p *corev1.Pod) { a(p); b(p) } }
	tests := map[string]struct {
		policy  corev1.RestartPolicy
		opt     podOpt
		problem string // "": none
		next    string // what happens next, when it is istio-aux's replace ("": not checked)
	}{
		"Never: the pod failed": {corev1.RestartPolicyNever,
			validation(exited(126, time.Minute), state{}, corev1.PodFailed), "its Job makes another, counted against its backoffLimit", ""},
		"OnFailure: crash-looping, a Job's": {corev1.RestartPolicyOnFailure,
			both(validation(waiting("CrashLoopBackOff"), exited(126, time.Minute), corev1.PodPending), ownedByJob), "istio-aux's function deletes the pod for its controller to make another (a PodReplaced Event",
			"istio-aux deletes the pod, and its controller makes another"},
		"OnFailure: crash-looping, no controller": {corev1.RestartPolicyOnFailure,
			validation(waiting("CrashLoopBackOff"), exited(126, time.Minute), corev1.PodPending), "no controller to make another, so istio-aux leaves it",
			"nothing: istio-aux deletes no pod without a controller"},
		"OnFailure: repaired": {corev1.RestartPolicyOnFailure,
			validation(exited(0, 10*time.Second), exited(126, time.Minute), corev1.PodRunning), "", ""},
		"another failure": {corev1.RestartPolicyOnFailure,
			validation(waiting("CrashLoopBackOff"), exited(1, time.Minute), corev1.PodPending), "", ""},
	}
	jobs := namespace("jobs", optedIn, created.Add(-time.Hour))
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := jobPod("jobs", "racer", tc.policy, running(), tc.opt)
			src := explain.Source{Client: fake.NewClientset(append(install(nil), jobs, p)...), SystemNamespace: sys, Now: func() time.Time { return now }}
			r, err := src.Report(context.Background(), explain.Selection{Namespace: "jobs", Names: []string{"racer"}})
			if err != nil {
				t.Fatal(err)
			}
			got := r.Pods[0]
			found := containsText(got.Problems, "Istio CNI had not set up the pod's traffic capture when it started on node node-1 (istio-validation exited 126)")
			if tc.problem == "" {
				if found {
					t.Errorf("problems %q: the CNI start race named where there is none", got.Problems)
				}
				return
			}
			if !found || !containsText(got.Problems, tc.problem) || got.Verdict != explain.VerdictProblem || !containsText(got.Checks, "-c istio-validation") {
				t.Errorf("verdict %s, problems %q, checks %q; want the CNI start race and %q", got.Verdict, got.Problems, got.Checks, tc.problem)
			}
			if tc.next != "" && (got.Decision.Outcome != "replace" || !strings.Contains(got.Next, tc.next)) {
				t.Errorf("decision %+v, next %q; want replace and %q", got.Decision, got.Next, tc.next)
			}
			for _, pr := range got.Problems {
				if strings.Contains(pr, "quit") && !strings.Contains(pr, "Istio CNI") {
					t.Errorf("a quit problem beside the CNI one: %q", pr)
				}
			}
		})
	}
}
