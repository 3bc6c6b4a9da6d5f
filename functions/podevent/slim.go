package podevent

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Slim returns a new pod holding only the fields the quit decision and the
// opt-in check read. It never mutates its argument, so it is safe on objects
// from an informer cache, and it is what the bridge caches and publishes.
//
// The result shares no maps or slices with the input except the immutable
// strings inside them.
func Slim(pod *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			Labels:            copyMap(pod.Labels),
			Annotations:       keepAnnotations(pod.Annotations),
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:  pod.Spec.RestartPolicy,
			Containers:     slimContainers(pod.Spec.Containers),
			InitContainers: slimContainers(pod.Spec.InitContainers),
		},
		Status: corev1.PodStatus{
			Phase:                 pod.Status.Phase,
			ContainerStatuses:     slimStatuses(pod.Status.ContainerStatuses),
			InitContainerStatuses: slimStatuses(pod.Status.InitContainerStatuses),
		},
	}
	return out
}

// keptAnnotations are the annotations anything downstream reads. Others
// (often large: last-applied-configuration, Istio's status blobs) are dropped.
var keptAnnotations = []string{
	"istio-aux.dev/enabled",
	"istio-aux.dev/sidecars",
	"proxy.istio.io/config",
	"sidecar.istio.io/nativeSidecar",
}

func keepAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for _, k := range keptAnnotations {
		if v, ok := in[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keptAnnotations))
			}
			out[k] = v
		}
	}
	return out
}

func copyMap(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

func slimContainers(in []corev1.Container) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: c.Name}
		if c.RestartPolicy != nil {
			p := *c.RestartPolicy
			out[i].RestartPolicy = &p
		}
	}
	return out
}

func slimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i, s := range in {
		out[i] = corev1.ContainerStatus{
			Name:         s.Name,
			Ready:        s.Ready,
			RestartCount: s.RestartCount,
			State:        slimState(s.State),
		}
	}
	return out
}

// slimState keeps which state a container is in and, when terminated, how it
// ended. Messages, image ids and timestamps other than finishedAt are dropped.
func slimState(in corev1.ContainerState) corev1.ContainerState {
	var out corev1.ContainerState
	switch {
	case in.Terminated != nil:
		out.Terminated = &corev1.ContainerStateTerminated{
			ExitCode:   in.Terminated.ExitCode,
			Reason:     in.Terminated.Reason,
			FinishedAt: in.Terminated.FinishedAt,
		}
	case in.Running != nil:
		out.Running = &corev1.ContainerStateRunning{StartedAt: in.Running.StartedAt}
	case in.Waiting != nil:
		out.Waiting = &corev1.ContainerStateWaiting{Reason: in.Waiting.Reason}
	}
	return out
}
