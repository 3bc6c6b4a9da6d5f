// Package kubeletparity checks istio-aux's copy of the kubelet's restart
// rule (pkg/decision.WillRestart) against the kubelet's own
// ContainerShouldRestart (k8s.io/kubernetes pkg/api/v1/pod, the version the
// harness builds), through a case table both read:
// pkg/decision/testdata/kubelet-restart.json. This test fills in the
// kubelet's answers (go test -update) and fails if the table no longer
// matches them; pkg/decision's TestWillRestartMatchesTheKubelet replays the
// same table against WillRestart in make test. It lives in the Kubernetes
// tools module so that istio-aux's own module never requires
// k8s.io/kubernetes.
package kubeletparity

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

var update = flag.Bool("update", false, "rewrite the table's expectations from the kubelet's function")

// Case is one row of the table.
type Case struct {
	Pod       corev1.RestartPolicy `json:"pod"`
	Container corev1.Container     `json:"container"`
	ExitCode  int32                `json:"exitCode"`
	Restart   bool                 `json:"restart"`
}

var table = filepath.Join("..", "..", "..", "..", "pkg", "decision", "testdata", "kubelet-restart.json")

func TestTableMatchesTheKubelet(t *testing.T) {
	cases := inputs()
	if !*update {
		raw, err := os.ReadFile(table)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &cases); err != nil {
			t.Fatal(err)
		}
		if n := len(inputs()); len(cases) != n {
			t.Fatalf("the table has %d cases, the inputs %d: run go test -update", len(cases), n)
		}
	}
	for i, c := range cases {
		got := podutil.ContainerShouldRestart(c.Container, corev1.PodSpec{RestartPolicy: c.Pod}, c.ExitCode)
		if *update {
			cases[i].Restart = got
		} else if got != c.Restart {
			t.Errorf("case %d (%+v): the kubelet says restart=%v, the table %v", i, c, got, c.Restart)
		}
	}
	if *update {
		// One case a line: a diff of the table reads as a list of cases.
		var b bytes.Buffer
		b.WriteString("[\n")
		for i, c := range cases {
			line, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(line)
			if i < len(cases)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString("]\n")
		if err := os.WriteFile(table, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// inputs crosses every pod policy, container policy, rule list and exit
// code that reaches a distinct branch of ContainerShouldRestart.
func inputs() []Case {
	policy := func(p corev1.ContainerRestartPolicy) *corev1.ContainerRestartPolicy { return &p }
	rule := func(a corev1.ContainerRestartRuleAction, op corev1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) corev1.ContainerRestartRule {
		return corev1.ContainerRestartRule{Action: a, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
	}
	const restart, all = corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleActionRestartAllContainers
	const in, notIn = corev1.ContainerRestartRuleOnExitCodesOpIn, corev1.ContainerRestartRuleOnExitCodesOpNotIn
	ruleSets := [][]corev1.ContainerRestartRule{
		nil,
		{rule(restart, in, 42)},
		{rule(restart, notIn, 0)},
		{rule(restart, in, 0)},
		{rule(all, in, 42)},
		{rule("Unknown", in, 42)},
		{rule(restart, "Unknown", 42)},
		{{Action: restart}},
		{rule(restart, in)},
		{rule(restart, notIn)},
		{rule(restart, in, 1), rule(all, in, 42)},
		{rule(all, in, 42), rule(restart, in, 42)},
		{rule("Unknown", in, 42), rule(restart, in, 42)},
	}
	var out []Case
	for _, pod := range []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever, "", "Unknown"} {
		for _, cp := range []*corev1.ContainerRestartPolicy{nil, policy("Always"), policy("OnFailure"), policy("Never"), policy("Unknown")} {
			for _, rules := range ruleSets {
				for _, code := range []int32{0, 1, 42} {
					out = append(out, Case{Pod: pod, Container: corev1.Container{RestartPolicy: cp, RestartPolicyRules: rules}, ExitCode: code})
				}
			}
		}
	}
	return out
}
