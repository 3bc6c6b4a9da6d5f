//go:build e2e

package config

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// racedShape is how a test pod of TestDeletePolicy is shaped: a Pending
// OnFailure pod of a Job whose istio-validation exited 126 (the CNI start
// race), or that with one thing changed.
type racedShape struct {
	policy     corev1.RestartPolicy
	phase      corev1.PodPhase
	state      corev1.ContainerState // istio-validation's
	last       int32                 // its last run's exit code; 0: none
	controller bool
}

var raced = racedShape{policy: corev1.RestartPolicyOnFailure, phase: corev1.PodPending,
	state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, last: keys.ValidationFailedCode, controller: true}

// TestDeletePolicy applies config/ to a real kube-apiserver and deletes
// pods as the function's ServiceAccount (its own token): RBAC grants
// delete on every pod, and the policy istio-aux-proxyquit-delete lets
// through only the pod pkg/decision's CNIRaced names (Istio CNI's start
// race under OnFailure, a controller to make another) in an opted-in
// namespace, never in a system one. A cluster admin is not affected.
func TestDeletePolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startWithConfig(ctx, t, cluster.Options{})
	// No webhook runs here: its configuration would refuse the pods of
	// opted-in namespaces it cannot reach (failurePolicy Fail).
	if err := c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "istio-aux-webhook", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", serviceAccountKubeconfig(ctx, t, c, "istio-aux-proxyquit"))
	if err != nil {
		t.Fatal(err)
	}
	fn, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	policyNamespaces(ctx, t, c)
	// create makes ns/name shaped s, its status written as a kubelet would.
	create := func(ns, name string, s racedShape) {
		t.Helper()
		p := mesh.Pod(ns, name, "", s.policy, corev1.Container{Name: keys.ProxyContainer, Image: "proxyv2"}, corev1.Container{Name: "app", Image: "app"})
		p.Spec.InitContainers = []corev1.Container{{Name: keys.ValidationContainer, Image: "proxyv2"}}
		if ns == "istio-aux" { // Pod Security restricted (100-namespace.yaml)
			for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
				for i := range cs {
					cs[i].SecurityContext = restrictedContext()
				}
			}
		}
		if s.controller { // no controller manager runs here: nothing collects it
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "job-uid", Controller: ptr.To(true)}}
		}
		p, err := c.Client().CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v := corev1.ContainerStatus{Name: keys.ValidationContainer, Image: "proxyv2", State: s.state, RestartCount: 1}
		if s.last != 0 {
			v.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: s.last, Reason: "Error"}
		}
		p.Status = corev1.PodStatus{Phase: s.phase, InitContainerStatuses: []corev1.ContainerStatus{v}}
		if _, err := c.Client().CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	with := func(f func(*racedShape)) racedShape { s := raced; f(&s); return s }
	exited := func(code int32) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error"}}
	}
	const onlyRaced = "istio-aux-proxyquit may delete only a Pending OnFailure pod whose istio-validation exited 126 (Istio CNI's start race)"
	denied := []struct {
		ns, name string
		shape    racedShape
		msg      string
	}{
		{"jobs", "never", with(func(s *racedShape) { s.policy, s.state, s.last = corev1.RestartPolicyNever, exited(126), 0 }), onlyRaced},
		{"jobs", "passed", with(func(s *racedShape) { s.state = exited(0) }), onlyRaced},
		{"jobs", "rerunning", with(func(s *racedShape) { s.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}} }), onlyRaced},
		{"jobs", "other-failure", with(func(s *racedShape) { s.last = 1 }), onlyRaced},
		{"jobs", "running", with(func(s *racedShape) { s.phase = corev1.PodRunning }), onlyRaced},
		{"jobs", "orphan", with(func(s *racedShape) { s.controller = false }), "istio-aux-proxyquit may delete only a pod that has a controller to make another"},
		{"other", "raced", raced, "istio-aux-proxyquit may not delete pods in namespace other: not opted in"},
		{"kube-system", "raced", raced, "istio-aux-proxyquit may not delete pods in the system namespace kube-system"},
		{"istio-aux", "raced", raced, "istio-aux-proxyquit may not delete pods in the system namespace istio-aux"},
	}
	allowed := map[string]racedShape{"jobs/raced": raced, "jobs/exited-126": with(func(s *racedShape) { s.state, s.last = exited(126), 0 }),
		"legacy-jobs/raced": raced, "pod-jobs/raced": raced}
	for _, tc := range denied {
		create(tc.ns, tc.name, tc.shape)
	}
	for key, s := range allowed {
		ns, name, _ := strings.Cut(key, "/")
		create(ns, name, s)
	}

	// The policy is in force once a dry run of a denied delete is refused
	// by it (admission runs on dry runs; nothing is deleted meanwhile).
	err = poll.Until(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		err := fn.CoreV1().Pods("jobs").Delete(ctx, "orphan", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), deletePolicy), nil
	})
	if err != nil {
		t.Fatalf("the delete policy never came into force: %v", err)
	}
	for _, tc := range denied {
		err := fn.CoreV1().Pods(tc.ns).Delete(ctx, tc.name, metav1.DeleteOptions{})
		want := fmt.Sprintf(`pods "%s" is forbidden: %s`, tc.name, denial(deletePolicy, tc.msg))
		if !apierrors.IsForbidden(err) || err.Error() != want {
			t.Errorf("delete %s/%s: %v, want 403 %q", tc.ns, tc.name, err, want)
		}
	}
	for key := range allowed {
		ns, name, _ := strings.Cut(key, "/")
		if err := fn.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete %s: %v, want it deleted", key, err)
		}
	}
	if err := fn.CoreV1().Pods("jobs").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deletecollection in jobs: %v, want it forbidden by RBAC", err)
	}
	for _, tc := range denied[:1] {
		if err := c.Client().CoreV1().Pods(tc.ns).Delete(ctx, tc.name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("a cluster admin's delete of %s/%s: %v", tc.ns, tc.name, err)
		}
	}
	if err := c.Client().CoreV1().Pods("kube-system").Delete(ctx, "raced", metav1.DeleteOptions{}); err != nil {
		t.Errorf("a cluster admin's delete of kube-system/raced: %v", err)
	}
}
