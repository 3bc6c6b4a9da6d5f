// Package slimtest holds test fixtures for pkg/slim and its users.
package slimtest

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// FullPod is an injected, opted-in Job pod as the API server returns it,
// with plenty the slim pod and the event do not carry: the fixture the
// slim pod's and the event contract's tests share.
func FullPod() *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	now := metav1.Unix(1_700_000_000, 0) // whole seconds: the JSON form of metav1.Time
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "mnist-worker-0", Namespace: "kubeflow", UID: "uid-1", ResourceVersion: "42",
			Labels: map[string]string{"job": "mnist", keys.LabelEnabled: "true"},
			Annotations: map[string]string{
				keys.AnnotationSidecars:                            "vault-agent",
				keys.AnnotationProxyConfig:                         "holdApplicationUntilProxyStarts: true",
				"sidecar.istio.io/status":                          strings.Repeat("x", 2000),
				"kubectl.kubernetes.io/last-applied-configuration": "{}",
			},
			OwnerReferences: []metav1.OwnerReference{{Name: "mnist", Kind: "TFJob"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
			Finalizers:      []string{"f"},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:  corev1.RestartPolicyOnFailure,
			NodeName:       "node-1",
			InitContainers: []corev1.Container{{Name: "istio-init", Image: "proxyv2"}, {Name: "side", RestartPolicy: &always}},
			Containers: []corev1.Container{
				{Name: keys.ProxyContainer, Image: "proxyv2", Args: []string{"proxy", "sidecar"},
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"cpu": resource.MustParse("1")}}},
				{Name: "tensorflow", Image: "tf", Command: []string{"python", "-u", "mnist.py"},
					Env: []corev1.EnvVar{{Name: "A", Value: "b"}}},
				{Name: "vault-agent", Image: "vault"},
			},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.0.0.1", HostIP: "10.1.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "istio-init", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: "ok"}}}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: keys.ProxyContainer, Ready: true, Image: "proxyv2", ImageID: "sha", ContainerID: "c1",
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}},
				{Name: "tensorflow", RestartCount: 2, ContainerID: "c2", State: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: "long log tail", FinishedAt: now, StartedAt: now}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}},
				{Name: "vault-agent", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "Pull", Message: "m"}}},
			},
		},
	}
}
