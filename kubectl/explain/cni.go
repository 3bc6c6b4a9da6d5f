package explain

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// Istio CNI's check in each pod, and its code for a capture not in place.
const (
	validationContainer = keys.ValidationContainer
	validationFailed    = keys.ValidationFailedCode
)

// cni finds a pod whose traffic capture Istio CNI never set up: its
// istio-validation failed, and has not passed since. That is the CNI start
// race (docs/faults.md): the pod's sandbox was made on a node whose CNI
// agent had not chained the istio-cni plugin in yet (a node booting, or
// the agent restarting). No app has run, so istio-aux has nothing to quit;
// what happens next is the kubelet's and Istio's.
func (e *explanation) cni() {
	var s *corev1.ContainerStatus
	for i, is := range e.in.Pod.Status.InitContainerStatuses {
		if is.Name == validationContainer {
			s = &e.in.Pod.Status.InitContainerStatuses[i]
		}
	}
	if s == nil {
		return
	}
	failed := func(t *corev1.ContainerStateTerminated) bool { return t != nil && t.ExitCode == validationFailed }
	switch {
	case s.State.Terminated != nil && s.State.Terminated.ExitCode == 0:
		return // it passed (perhaps after a repair)
	case !failed(s.State.Terminated) && !failed(s.LastTerminationState.Terminated):
		return
	}
	p := e.in.Pod
	what := "the kubelet retries istio-validation in the same sandbox, each run counted toward a Job's backoffLimit; it passes only if Istio CNI's repair controller sets up the pod's traffic capture (repairPods), so once it has failed and is not running again istio-aux's function deletes the pod for its controller to make another (a PodReplaced Event; one failure of a Job's backoffLimit)"
	if metav1.GetControllerOf(p) == nil {
		what = "the kubelet retries istio-validation in the same sandbox, where it passes only if Istio CNI's repair controller sets up the pod's traffic capture (repairPods); the pod has no controller to make another, so istio-aux leaves it: delete it and create it again"
	}
	if p.Spec.RestartPolicy == corev1.RestartPolicyNever || p.Status.Phase == corev1.PodFailed {
		what = "the pod has failed (an init container is not retried under restartPolicy Never): its Job makes another, counted against its backoffLimit"
	}
	e.problem(fmt.Sprintf("Istio CNI had not set up the pod's traffic capture when it started on node %s (%s exited %d): its CNI agent was not ready there yet; "+
		"no app has run, so istio-aux has nothing to quit; %s", p.Spec.NodeName, validationContainer, validationFailed, what),
		fmt.Sprintf("kubectl logs -n %s %s -c %s", p.Namespace, p.Name, validationContainer),
		fmt.Sprintf("kubectl get pods -A -l k8s-app=istio-cni-node --field-selector spec.nodeName=%s", p.Spec.NodeName))
}
