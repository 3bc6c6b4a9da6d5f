package decision_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

func TestKubeletOf(t *testing.T) {
	for v, want := range map[string]int{
		"v1.33.13":            33,
		"v1.32.9-eks-1234abc": 32,
		"v1.36.3+k3s1":        36,
		"1.35.0":              35,
		"":                    0, // unknown: the newest
		"not a version":       0,
		"v2.0.0":              0,
		"v1.30.14-gke.1234":   30,
	} {
		if got := decision.KubeletOf(v); got.Minor != want {
			t.Errorf("KubeletOf(%q) = %+v, want minor %d", v, got, want)
		}
	}
}

// withPolicy gives the pod's app a restart policy of its own (and rules).
func withPolicy(p corev1.ContainerRestartPolicy, rules ...corev1.ContainerRestartRule) func(*corev1.Pod) {
	return func(pod *corev1.Pod) {
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == "app" {
				pod.Spec.Containers[i].RestartPolicy = &p
				pod.Spec.Containers[i].RestartPolicyRules = rules
			}
		}
	}
}

// TestDecideFollowsThePodsKubelet: an API server from 1.35 on accepts an
// app's own restart policy and rules, and may hand the pod to a kubelet
// that is up to three minors older, which ignores them: the quit then
// waits as that kubelet acts, not as the API says.
func TestDecideFollowsThePodsKubelet(t *testing.T) {
	restartAll := corev1.ContainerRestartRule{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}
	wait, quit := decision.Wait, decision.Quit
	tests := []struct {
		name string
		pod  *corev1.Pod
		// want by kubelet minor
		want map[int]decision.Outcome
	}{
		{"app Never under pod OnFailure, exit 1: 1.34 and older restart it (the pod's policy)",
			pod(onFailure, []c{proxy(running), app(exit(1))}, withPolicy(corev1.ContainerRestartPolicyNever)),
			map[int]decision.Outcome{32: wait, 33: wait, 34: wait, 35: quit, 36: quit, 0: quit}},
		{"app Always under pod Never, exit 0: only 1.35 and newer restart it",
			pod(never, []c{proxy(running), app(exit(0))}, withPolicy(corev1.ContainerRestartPolicyAlways)),
			map[int]decision.Outcome{32: quit, 33: quit, 34: quit, 35: wait, 36: wait, 0: wait}},
		{"RestartAllContainers on 42: 1.35 falls back to the app's Never",
			pod(never, []c{proxy(running), app(exit(42))}, withPolicy(corev1.ContainerRestartPolicyNever, restartAll)),
			map[int]decision.Outcome{32: quit, 34: quit, 35: quit, 36: wait, 0: wait}},
		{"no policy of its own: every kubelet alike",
			pod(onFailure, []c{proxy(running), app(exit(1))}),
			map[int]decision.Outcome{32: wait, 35: wait, 36: wait, 0: wait}},
	}
	for _, tc := range tests {
		for minor, want := range tc.want {
			if got := decision.Decide(slim.Of(tc.pod), decision.Options{Kubelet: decision.Kubelet{Minor: minor}}); got.Outcome != want {
				t.Errorf("%s, kubelet 1.%d: %v (%s), want %v", tc.name, minor, got.Outcome, got.Reason, want)
			}
		}
	}
}

// TestDecideForAnyKubelet: what the bridge publishes without knowing the
// node covers what the function, which reads it, decides on any kubelet.
func TestDecideForAnyKubelet(t *testing.T) {
	pods := map[string]*corev1.Pod{
		"app Never, pod OnFailure, exit 1": pod(onFailure, []c{proxy(running), app(exit(1))}, withPolicy(corev1.ContainerRestartPolicyNever)),
		"app Always, pod Never, exit 0":    pod(never, []c{proxy(running), app(exit(0))}, withPolicy(corev1.ContainerRestartPolicyAlways)),
		"app OnFailure, pod Never, exit 3": pod(never, []c{proxy(running), app(exit(3))}, withPolicy(corev1.ContainerRestartPolicyOnFailure)),
		"no policy, exit 0":                pod(onFailure, []c{proxy(running), app(exit(0))}),
		"no policy, exit 1":                pod(onFailure, []c{proxy(running), app(exit(1))}),
		"app running":                      pod(never, []c{proxy(running), app(running)}, withPolicy(corev1.ContainerRestartPolicyAlways)),
	}
	for name, p := range pods {
		sp := slim.Of(p)
		anyQuit := false
		for minor := 32; minor <= 36; minor++ {
			anyQuit = anyQuit || decision.Decide(sp, decision.Options{Kubelet: decision.Kubelet{Minor: minor}}).Outcome == decision.Quit
		}
		got := decision.DecideForAnyKubelet(sp, decision.Options{})
		if (got.Outcome == decision.Quit) != anyQuit {
			t.Errorf("%s: DecideForAnyKubelet %v, some kubelet from 1.31 to 1.36 quits: %v", name, got.Outcome, anyQuit)
		}
		if !decision.KubeletMatters(sp) && got != decision.Decide(sp, decision.Options{}) {
			t.Errorf("%s: the kubelet does not matter, yet DecideForAnyKubelet %v differs from Decide", name, got)
		}
	}
}
