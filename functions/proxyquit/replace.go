package proxyquit

import (
	"context"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// replace deletes a pod that Istio CNI's start race left unable ever to
// start (decision.CNIRaced: restartPolicy OnFailure, istio-validation
// failed for want of the traffic capture, which its sandbox will never
// have), so that its controller makes another. Left alone, the kubelet
// runs istio-validation again and again, and every run counts toward its
// Job's backoffLimit until the Job fails; deleted, the pod costs its Job
// one failure, as a Never pod that met the race does. Only the pod as it
// was read is deleted (its uid and resourceVersion as preconditions): one
// that changed since, perhaps repaired, is read and decided again on the
// redelivery. A pod without a controller would not be made again: it is
// left alone, with a Warning Event saying why. The API server's policy
// (config/204-proxyquit-exec-policy.yaml) lets the function delete no
// other pod.
func (f *Function) replace(ctx context.Context, pod *corev1.Pod, d decision.Decision) result {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		f.record(ctx, pod, true, corev1.EventTypeWarning, names.ReasonPodReplaceFailed,
			fmt.Sprintf("%s: %s exited %d and the kubelet only runs it again in the same sandbox; the pod has no controller to make another, so istio-aux leaves it: delete it and create it again",
				d.Reason, keys.ValidationContainer, keys.ValidationFailedCode))
		return result{code: http.StatusOK, outcome: OutcomeIgnored, detail: d.Reason + ": no controller would make the pod again; left alone"}
	}
	dctx, cancel := context.WithTimeout(ctx, apiTimeout)
	err := f.cluster.DeletePod(dctx, pod.Namespace, pod.Name, pod.UID, pod.ResourceVersion)
	cancel()
	switch {
	case err == nil:
		f.record(ctx, pod, true, corev1.EventTypeWarning, names.ReasonPodReplaced,
			fmt.Sprintf("Deleted the pod: %s when it started (%s exited %d), and the kubelet would only run that check again in the same sandbox, each run counted as a failure; its %s %s makes another",
				d.Reason, keys.ValidationContainer, keys.ValidationFailedCode, owner.Kind, owner.Name))
		return result{code: http.StatusOK, outcome: OutcomeReplaced, detail: "deleted the pod: " + d.Reason}
	case apierrors.IsNotFound(err):
		return result{code: http.StatusOK, outcome: OutcomeGone, detail: "pod not found"}
	case apierrors.IsConflict(err):
		// Changed since it was read (or replaced by a pod of the same name):
		// the redelivery reads and decides again.
		return result{code: http.StatusServiceUnavailable, outcome: OutcomeError, detail: "the pod changed before its delete", err: err}
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		f.record(ctx, pod, true, corev1.EventTypeWarning, names.ReasonPodReplaceFailed,
			fmt.Sprintf("%s, but istio-aux may not delete the pod: %v", d.Reason, err))
		return result{code: http.StatusUnprocessableEntity, outcome: OutcomeFailedFinal, detail: "deleting the pod", err: err}
	}
	return apiFailure("pod "+pod.Namespace+"/"+pod.Name+" (delete)", err)
}
