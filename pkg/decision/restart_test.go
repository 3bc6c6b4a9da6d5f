package decision_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

func policy(p corev1.ContainerRestartPolicy) *corev1.ContainerRestartPolicy { return &p }

func rule(action corev1.ContainerRestartRuleAction, op corev1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) slim.Rule {
	return slim.Rule{Action: action, ExitCodes: &slim.ExitCodes{Operator: op, Values: codes}}
}

const (
	restart    = corev1.ContainerRestartRuleActionRestart
	restartAll = corev1.ContainerRestartRuleActionRestartAllContainers
	in         = corev1.ContainerRestartRuleOnExitCodesOpIn
	notIn      = corev1.ContainerRestartRuleOnExitCodesOpNotIn
)

// TestWillRestart walks every branch of the kubelet's ContainerShouldRestart
// and FindMatchingContainerRestartRule (k8s.io/kubernetes
// pkg/api/v1/pod/util.go, v1.36.3), one or more rows each, named after it.
func TestWillRestart(t *testing.T) {
	no, one, all := decision.NoRestart, decision.RestartContainer, decision.RestartAll
	tests := []struct {
		name string
		c    slim.Container
		pod  corev1.RestartPolicy
		exit int32
		want decision.Restart
	}{
		// No container policy: rules are not read at all; the pod decides.
		{"pod Always, exit 0", slim.Container{}, corev1.RestartPolicyAlways, 0, one},
		{"pod OnFailure, exit 0", slim.Container{}, corev1.RestartPolicyOnFailure, 0, no},
		{"pod OnFailure, exit 1", slim.Container{}, corev1.RestartPolicyOnFailure, 1, one},
		{"pod Never, exit 1", slim.Container{}, corev1.RestartPolicyNever, 1, no},
		{"pod policy empty: the API default, Always", slim.Container{}, "", 0, one},
		{"pod policy unknown: Always", slim.Container{}, "Sometimes", 0, one},
		{"rules without a container policy are ignored",
			slim.Container{RestartPolicyRules: slim.Rules{rule(restart, in, 42)}}, corev1.RestartPolicyNever, 42, no},

		// Container policy, no rule matches.
		{"container Always under pod Never", slim.Container{RestartPolicy: policy("Always")}, corev1.RestartPolicyNever, 0, one},
		{"container OnFailure, exit 1, pod Never", slim.Container{RestartPolicy: policy("OnFailure")}, corev1.RestartPolicyNever, 1, one},
		{"container OnFailure, exit 0", slim.Container{RestartPolicy: policy("OnFailure")}, corev1.RestartPolicyNever, 0, no},
		{"container Never, exit 1, pod OnFailure", slim.Container{RestartPolicy: policy("Never")}, corev1.RestartPolicyOnFailure, 1, no},
		{"container policy unknown: the pod's decides (OnFailure, 1)", slim.Container{RestartPolicy: policy("Sometimes")}, corev1.RestartPolicyOnFailure, 1, one},
		{"container policy unknown: the pod's decides (Never, 1)", slim.Container{RestartPolicy: policy("Sometimes")}, corev1.RestartPolicyNever, 1, no},

		// Rules: In and NotIn, matching or not.
		{"In, code listed: Restart", slim.Container{RestartPolicy: policy("Never"), RestartPolicyRules: slim.Rules{rule(restart, in, 42)}}, corev1.RestartPolicyNever, 42, one},
		{"In, code not listed: falls back to Never", slim.Container{RestartPolicy: policy("Never"), RestartPolicyRules: slim.Rules{rule(restart, in, 42)}}, corev1.RestartPolicyNever, 1, no},
		{"NotIn, code not listed: Restart", slim.Container{RestartPolicy: policy("Never"), RestartPolicyRules: slim.Rules{rule(restart, notIn, 0)}}, corev1.RestartPolicyNever, 3, one},
		{"NotIn, code listed: falls back to Never", slim.Container{RestartPolicy: policy("Never"), RestartPolicyRules: slim.Rules{rule(restart, notIn, 0)}}, corev1.RestartPolicyNever, 0, no},
		{"In on exit 0 restarts a success", slim.Container{RestartPolicy: policy("Never"), RestartPolicyRules: slim.Rules{rule(restart, in, 0)}}, corev1.RestartPolicyNever, 0, one},
		{"unknown operator never matches", slim.Container{RestartPolicy: policy("Never"), RestartPolicyRules: slim.Rules{rule(restart, "Is", 42)}}, corev1.RestartPolicyNever, 42, no},
		{"a rule without exit codes never matches", slim.Container{RestartPolicy: policy("Never"), RestartPolicyRules: slim.Rules{{Action: restart}}}, corev1.RestartPolicyNever, 42, no},
		{"empty In list never matches", slim.Container{RestartPolicy: policy("Never"), RestartPolicyRules: slim.Rules{rule(restart, in)}}, corev1.RestartPolicyNever, 42, no},
		{"empty NotIn list always matches", slim.Container{RestartPolicy: policy("Never"), RestartPolicyRules: slim.Rules{rule(restart, notIn)}}, corev1.RestartPolicyNever, 0, one},

		// Several rules: the first match wins, later ones are not read.
		{"first match wins over a later RestartAll", slim.Container{RestartPolicy: policy("Never"),
			RestartPolicyRules: slim.Rules{rule(restart, in, 42), rule(restartAll, in, 42)}}, corev1.RestartPolicyNever, 42, one},
		{"a non-matching rule is passed over", slim.Container{RestartPolicy: policy("Never"),
			RestartPolicyRules: slim.Rules{rule(restart, in, 1), rule(restartAll, in, 42)}}, corev1.RestartPolicyNever, 42, all},
		{"a matching rule with an unknown action falls back to the container policy, not to later rules", slim.Container{RestartPolicy: policy("Never"),
			RestartPolicyRules: slim.Rules{rule("Explode", in, 42), rule(restart, in, 42)}}, corev1.RestartPolicyNever, 42, no},
		{"unknown action, container OnFailure", slim.Container{RestartPolicy: policy("OnFailure"),
			RestartPolicyRules: slim.Rules{rule("Explode", in, 42)}}, corev1.RestartPolicyNever, 42, one},

		// RestartAllContainers (gate on, as in 1.36).
		{"RestartAll matches", slim.Container{RestartPolicy: policy("Never"), RestartPolicyRules: slim.Rules{rule(restartAll, in, 137)}}, corev1.RestartPolicyNever, 137, all},
		{"RestartAll does not match: container Never", slim.Container{RestartPolicy: policy("Never"), RestartPolicyRules: slim.Rules{rule(restartAll, in, 137)}}, corev1.RestartPolicyOnFailure, 1, no},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decision.WillRestart(tc.c, tc.pod, tc.exit, decision.Kubelet{}); got != tc.want {
				t.Errorf("WillRestart = %v, want %v", got, tc.want)
			}
		})
	}
}

// jobPod is a Job pod with an app (container-level settings as given) that
// has exited with code, and a running classic istio-proxy.
func jobPod(pod corev1.RestartPolicy, app corev1.Container, code int32) *slim.Pod {
	app.Name = "app"
	return slim.Of(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec:       corev1.PodSpec{RestartPolicy: pod, Containers: []corev1.Container{{Name: "istio-proxy"}, app}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "istio-proxy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}},
		}},
	})
}

func rules(rs ...corev1.ContainerRestartRule) []corev1.ContainerRestartRule { return rs }

func corev1Rule(action corev1.ContainerRestartRuleAction, op corev1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) corev1.ContainerRestartRule {
	return corev1.ContainerRestartRule{Action: action, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
}

// TestDecideContainerLevel: the decision table's container-level rows,
// starting with the three cases of the issue that brought them.
func TestDecideContainerLevel(t *testing.T) {
	wait, quit := decision.Wait, decision.Quit
	tests := []struct {
		name string
		pod  *slim.Pod
		want decision.Decision
	}{
		// 1: the kubelet retries the app: its proxy must stay.
		{"pod Never, app OnFailure, exit 1: retried", jobPod(corev1.RestartPolicyNever,
			corev1.Container{RestartPolicy: policy("OnFailure")}, 1), decision.Decision{wait, decision.ReasonAppWillRestart}},
		// 2: a rule retries exit 42.
		{"pod Never, rule restart on 42, exit 42: retried", jobPod(corev1.RestartPolicyNever,
			corev1.Container{RestartPolicy: policy("Never"), RestartPolicyRules: rules(corev1Rule(restart, in, 42))}, 42),
			decision.Decision{wait, decision.ReasonAppWillRestart}},
		// 3: the kubelet will not retry: quit, or the Job hangs.
		{"pod OnFailure, app Never, exit 1: not retried", jobPod(corev1.RestartPolicyOnFailure,
			corev1.Container{RestartPolicy: policy("Never")}, 1), decision.Decision{quit, decision.ReasonAppsDone}},

		{"pod Never, rule restart on 42, exit 1: done", jobPod(corev1.RestartPolicyNever,
			corev1.Container{RestartPolicy: policy("Never"), RestartPolicyRules: rules(corev1Rule(restart, in, 42))}, 1),
			decision.Decision{quit, decision.ReasonAppsDone}},
		{"pod OnFailure, rule restart NotIn [0], exit 0: done", jobPod(corev1.RestartPolicyOnFailure,
			corev1.Container{RestartPolicy: policy("OnFailure"), RestartPolicyRules: rules(corev1Rule(restart, notIn, 0))}, 0),
			decision.Decision{quit, decision.ReasonAppsDone}},
		{"pod OnFailure, app OnFailure, exit 0: done", jobPod(corev1.RestartPolicyOnFailure,
			corev1.Container{RestartPolicy: policy("OnFailure")}, 0), decision.Decision{quit, decision.ReasonAppsDone}},
		{"pod Never, app Always: runs again and again", jobPod(corev1.RestartPolicyNever,
			corev1.Container{RestartPolicy: policy("Always")}, 0), decision.Decision{wait, decision.ReasonAppWillRestart}},
		{"RestartAllContainers on the app's code: the whole pod runs again", jobPod(corev1.RestartPolicyNever,
			corev1.Container{RestartPolicy: policy("Never"), RestartPolicyRules: rules(corev1Rule(restartAll, in, 137))}, 137),
			decision.Decision{wait, decision.ReasonRestartAll}},
		{"RestartAllContainers on another code", jobPod(corev1.RestartPolicyNever,
			corev1.Container{RestartPolicy: policy("Never"), RestartPolicyRules: rules(corev1Rule(restartAll, in, 137))}, 1),
			decision.Decision{quit, decision.ReasonAppsDone}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decision.Decide(tc.pod, decision.Options{}); got != tc.want {
				t.Errorf("Decide = %v (%q), want %v (%q)", got.Outcome, got.Reason, tc.want.Outcome, tc.want.Reason)
			}
		})
	}
	// Two apps: one retried by a rule, the other restarting all: RestartAll
	// is the stronger reason, whatever the order.
	p := jobPod(corev1.RestartPolicyNever, corev1.Container{RestartPolicy: policy("OnFailure")}, 1)
	p.Spec.Containers = append(p.Spec.Containers, slim.Container{Name: "b", RestartPolicy: policy("Never"),
		RestartPolicyRules: slim.Rules{rule(restartAll, in, 9)}})
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, slim.ContainerStatus{Name: "b",
		State: slim.State{Terminated: &slim.Terminated{ExitCode: 9}}})
	if got := decision.Decide(p, decision.Options{}); got.Reason != decision.ReasonRestartAll {
		t.Errorf("two apps: Decide = %v", got)
	}
	// An extra sidecar's own rules do not hold the proxy back.
	q := jobPod(corev1.RestartPolicyNever, corev1.Container{}, 0)
	q.Spec.Containers = append(q.Spec.Containers, slim.Container{Name: "vault-agent", RestartPolicy: policy("Always")})
	q.Status.ContainerStatuses = append(q.Status.ContainerStatuses, slim.ContainerStatus{Name: "vault-agent",
		State: slim.State{Terminated: &slim.Terminated{ExitCode: 1}}})
	if got := decision.Decide(q, decision.Options{ExtraSidecars: []string{"vault-agent"}}); got.Outcome != quit {
		t.Errorf("sidecar with Always: Decide = %v", got)
	}
}

// TestParseSidecars: the sidecars setting is read as a pod's annotation is,
// bounded: at most slim.MaxSidecars names, at most MaxSidecarsLen bytes,
// refused past either (an unbounded 1 MiB list, 144,960 names, made every
// decision cost 17 ms).
func TestParseSidecars(t *testing.T) {
	names := func(n int, sep string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(sep)
			}
			fmt.Fprintf(&b, "%s-%d", strings.Repeat("s", 60), i) // 62 or 63 characters
		}
		return b.String()
	}
	for _, tc := range []struct {
		in      string
		want    int    // names read
		refused string // part of the error, "" if accepted
	}{
		{" vault-agent, ,fluent-bit ", 2, ""},
		{"", 0, ""},
		{"vault-agent,vault-agent", 1, ""},
		{"vault agent", 0, "not a container name"},
		{"a/b", 0, "not a container name"},
		{names(slim.MaxSidecars, ",\n  "), slim.MaxSidecars, ""},
		{names(slim.MaxSidecars, ",") + "," + names(slim.MaxSidecars, ","), slim.MaxSidecars, ""}, // repeats are one name
		{names(slim.MaxSidecars+1, ","), 0, "more than 64 names"},
		{strings.Repeat("c,", decision.MaxSidecarsLen), 0, "bytes, more than"},
		{strings.Repeat(" ", decision.MaxSidecarsLen+1), 0, "at most 64 names are read"},
	} {
		got, err := decision.ParseSidecars(tc.in)
		switch {
		case tc.refused == "" && (err != nil || len(got) != tc.want):
			t.Errorf("ParseSidecars(%.40q…) = %d names, %v; want %d", tc.in, len(got), err, tc.want)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("ParseSidecars(%.40q…) = %d names, %v; want an error saying %q", tc.in, len(got), err, tc.refused)
		}
	}
	if got, _ := decision.ParseSidecars(" vault-agent, ,fluent-bit "); !slices.Equal(got, []string{"vault-agent", "fluent-bit"}) {
		t.Errorf("ParseSidecars = %q, want the names in their order", got)
	}
	if got, err := decision.ParseSidecars(""); err != nil || got != nil {
		t.Errorf("ParseSidecars(\"\") = %q, %v", got, err)
	}
}

// nativePod is a Job pod whose istio-proxy is a native sidecar (running or
// exited as given) and whose app exited with code.
func nativePod(pod corev1.RestartPolicy, app corev1.Container, code int32, proxy corev1.ContainerState) *slim.Pod {
	app.Name = "app"
	always := corev1.ContainerRestartPolicyAlways
	return slim.Of(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: corev1.PodSpec{RestartPolicy: pod, Containers: []corev1.Container{app},
			InitContainers: []corev1.Container{{Name: "istio-proxy", RestartPolicy: &always}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "istio-proxy", State: proxy}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}},
	})
}

// TestDecideQuitNative: with QuitNative a native proxy is decided on the
// same rule as a classic one, retries and restart rules included; without
// it, it is left to the kubelet.
func TestDecideQuitNative(t *testing.T) {
	up := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	down := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
	on := decision.Options{QuitNative: true}
	for _, tc := range []struct {
		name string
		pod  *slim.Pod
		opts decision.Options
		want decision.Decision
	}{
		{"off: left to the kubelet", nativePod(corev1.RestartPolicyNever, corev1.Container{}, 0, up), decision.Options{}, decision.Decision{decision.Ignore, decision.ReasonNativeSidecar}},
		{"on: apps done", nativePod(corev1.RestartPolicyNever, corev1.Container{}, 0, up), on, decision.Decision{decision.Quit, decision.ReasonAppsDone}},
		{"on: OnFailure retry keeps it", nativePod(corev1.RestartPolicyOnFailure, corev1.Container{}, 1, up), on, decision.Decision{decision.Wait, decision.ReasonAppWillRestart}},
		{"on: a rule's retry keeps it", nativePod(corev1.RestartPolicyNever, corev1.Container{RestartPolicy: policy("Never"),
			RestartPolicyRules: rules(corev1Rule(restart, in, 42))}, 42, up), on, decision.Decision{decision.Wait, decision.ReasonAppWillRestart}},
		{"on: app Never under pod OnFailure", nativePod(corev1.RestartPolicyOnFailure, corev1.Container{RestartPolicy: policy("Never")}, 1, up), on, decision.Decision{decision.Quit, decision.ReasonAppsDone}},
		{"on: already stopped", nativePod(corev1.RestartPolicyNever, corev1.Container{}, 0, down), on, decision.Decision{decision.Ignore, decision.ReasonProxyDone}},
	} {
		if got := decision.Decide(tc.pod, tc.opts); got != tc.want {
			t.Errorf("%s: Decide = %v (%q), want %v (%q)", tc.name, got.Outcome, got.Reason, tc.want.Outcome, tc.want.Reason)
		}
	}
}

// TestWhyRestart: the cause named is the setting that decided, read in the
// kubelet's order, so that kubectl istio-aux explain points at it.
func TestWhyRestart(t *testing.T) {
	never := policy("Never")
	tests := map[string]struct {
		c     slim.Container
		pod   corev1.RestartPolicy
		exit  int32
		want  decision.Restart
		cause decision.RestartCause
	}{
		"the pod's OnFailure": {slim.Container{}, corev1.RestartPolicyOnFailure, 1, decision.RestartContainer,
			decision.RestartCause{Source: decision.FromPod, Policy: "OnFailure"}},
		"the pod's Never": {slim.Container{}, corev1.RestartPolicyNever, 1, decision.NoRestart,
			decision.RestartCause{Source: decision.FromPod, Policy: "Never"}},
		"an empty pod policy is named as the API default": {slim.Container{}, "", 0, decision.RestartContainer,
			decision.RestartCause{Source: decision.FromPod, Policy: "Always"}},
		"the container's own Never": {slim.Container{RestartPolicy: never}, corev1.RestartPolicyOnFailure, 1, decision.NoRestart,
			decision.RestartCause{Source: decision.FromContainer, Policy: "Never"}},
		"an unknown container policy: the pod's": {slim.Container{RestartPolicy: policy("Sometimes")}, corev1.RestartPolicyNever, 1, decision.NoRestart,
			decision.RestartCause{Source: decision.FromPod, Policy: "Never"}},
		"the second rule": {slim.Container{RestartPolicy: never, RestartPolicyRules: slim.Rules{rule(restart, in, 1), rule(restartAll, in, 42)}},
			corev1.RestartPolicyNever, 42, decision.RestartAll, decision.RestartCause{Source: decision.FromRule, Rule: 1, Policy: "RestartAllContainers"}},
		"a matching rule with an unknown action: the container's policy": {slim.Container{RestartPolicy: never,
			RestartPolicyRules: slim.Rules{rule("Explode", in, 42)}}, corev1.RestartPolicyNever, 42, decision.NoRestart,
			decision.RestartCause{Source: decision.FromContainer, Policy: "Never"}},
	}
	for name, tc := range tests {
		got, cause := decision.WhyRestart(tc.c, tc.pod, tc.exit, decision.Kubelet{})
		if got != tc.want || cause != tc.cause {
			t.Errorf("%s: WhyRestart = %v, %+v; want %v, %+v", name, got, cause, tc.want, tc.cause)
		}
		if w := decision.WillRestart(tc.c, tc.pod, tc.exit, decision.Kubelet{}); w != got {
			t.Errorf("%s: WillRestart = %v, WhyRestart = %v", name, w, got)
		}
	}
}
