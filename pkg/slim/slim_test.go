package slim

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fullPod is a pod as the API server returns it, with plenty the slim pod
// does not carry.
func fullPod() *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	now := metav1.Unix(1_700_000_000, 0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "mnist-worker-0", Namespace: "kubeflow", UID: "uid-1", ResourceVersion: "42",
			Labels: map[string]string{"job": "mnist", "istio-aux.dev/enabled": "true"},
			Annotations: map[string]string{
				"istio-aux.dev/sidecars":                           "vault-agent",
				"proxy.istio.io/config":                            "holdApplicationUntilProxyStarts: true",
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
				{Name: "istio-proxy", Image: "proxyv2", Args: []string{"proxy", "sidecar"},
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
				{Name: "istio-proxy", Ready: true, Image: "proxyv2", ImageID: "sha", ContainerID: "c1",
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}},
				{Name: "tensorflow", RestartCount: 2, ContainerID: "c2", State: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: "long log tail", FinishedAt: now, StartedAt: now}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}},
				{Name: "vault-agent", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "Pull", Message: "m"}}},
			},
		},
	}
}

func TestOfKeepsExactlyTheSlimFields(t *testing.T) {
	full := fullPod()
	before := full.DeepCopy()
	got := Of(full)
	if !cmp.Equal(full, before) {
		t.Fatal("Of mutated its argument")
	}
	always := corev1.ContainerRestartPolicyAlways
	now := full.Status.ContainerStatuses[0].State.Running.StartedAt
	want := &Pod{
		APIVersion: "v1", Kind: "Pod",
		Meta: Meta{Name: "mnist-worker-0", Namespace: "kubeflow", UID: "uid-1", ResourceVersion: "42",
			Labels:      Kept{"istio-aux.dev/enabled": "true"},
			Annotations: Kept{"istio-aux.dev/sidecars": "vault-agent"}},
		Spec: Spec{
			RestartPolicy:  corev1.RestartPolicyOnFailure,
			InitContainers: Containers{{Name: "istio-init"}, {Name: "side", RestartPolicy: &always}},
			Containers:     Containers{{Name: "istio-proxy"}, {Name: "tensorflow"}, {Name: "vault-agent"}},
		},
		Status: Status{
			Phase:                 corev1.PodRunning,
			InitContainerStatuses: Statuses{{Name: "istio-init", State: State{Terminated: &Terminated{ExitCode: 0, Reason: "Completed"}}}},
			ContainerStatuses: Statuses{
				{Name: "istio-proxy", Ready: true, State: State{Running: &Running{StartedAt: now}}},
				{Name: "tensorflow", RestartCount: 2, State: State{Terminated: &Terminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}}},
				{Name: "vault-agent", State: State{Waiting: &Waiting{Reason: "Pull"}}},
			},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Of (-want +got):\n%s", d)
	}
	// Nothing shared: changing the slim copy must not reach the original.
	got.Labels["istio-aux.dev/enabled"] = "changed"
	*got.Spec.InitContainers[1].RestartPolicy = corev1.ContainerRestartPolicyNever
	if full.Labels["istio-aux.dev/enabled"] != "true" || *full.Spec.InitContainers[1].RestartPolicy != always {
		t.Error("Of shares memory with its input")
	}
}

func TestAnnotatedSidecars(t *testing.T) {
	many := strings.Repeat("x,", 10*MaxSidecars)
	for in, want := range map[string][]string{
		"":                               nil,
		"vault-agent":                    {"vault-agent"},
		" vault-agent , ,fluent-bit ,":   {"vault-agent", "fluent-bit"},
		"a,b,a":                          {"a", "b"},
		",,,":                            nil,
		many + "late":                    {"x", "late"},
		strings.Repeat("n,", 0) + "only": {"only"},
	} {
		p := &Pod{Meta: Meta{Annotations: Kept{"istio-aux.dev/sidecars": in}}}
		if got := p.AnnotatedSidecars(); !cmp.Equal(got, want) {
			t.Errorf("AnnotatedSidecars(%.20q) = %q, want %q", in, got, want)
		}
	}
	var names []string
	for i := range 2 * MaxSidecars {
		names = append(names, "c"+strings.Repeat("z", i))
	}
	p := &Pod{Meta: Meta{Annotations: Kept{"istio-aux.dev/sidecars": strings.Join(names, ",")}}}
	if got := p.AnnotatedSidecars(); len(got) != MaxSidecars || got[0] != names[0] {
		t.Errorf("read %d names, want the first %d", len(got), MaxSidecars)
	}
}
