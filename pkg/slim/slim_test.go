package slim

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/slim/slimtest"
)

func fullPod() *corev1.Pod { return slimtest.FullPod() }

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
				{Name: "tensorflow", RestartCount: 2, State: State{Terminated: &Terminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}},
					LastState: LastState{Terminated: &LastTerminated{ExitCode: 1}}}, // its exit code only
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
		" vault-agent , ,fluent-bit ,":   {"vault-agent", "fluent-bit"}, //nolint:gocritic // the spaces are what is tested
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
