package decision

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/decision/decisiontest"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// TestInputsDecideAlike: for 30,000 random pods and every configuration,
// the decision and the opt-in read from Inputs(p) are those read from p.
func TestInputsDecideAlike(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	configs := []Options{{}, {QuitNative: true}, {ExtraSidecars: []string{"b"}}, {ExtraSidecars: []string{"a", "c"}, QuitNative: true}}
	nsLabels := []map[string]string{nil, {keys.LabelEnabled: "true"}}
	decisions := map[Outcome]int{}
	const pods = 30_000
	for i := range pods {
		p := decisiontest.RandomPod(r)
		in := Inputs(p)
		for _, o := range configs {
			want, got := Decide(p, o), Decide(in, o)
			if got != want {
				t.Fatalf("pod %d %s\nDecide(p) = %v, Decide(Inputs(p)) = %v (inputs %s)", i, cmp.Diff(nil, p), want, got, cmp.Diff(nil, in))
			}
			decisions[want.Outcome]++
		}
		for _, ns := range nsLabels {
			if OptedIn(ns, p.Labels, p.Annotations) != OptedIn(ns, in.Labels, in.Annotations) {
				t.Fatalf("pod %d: the opt-in differs (labels %v annotations %v)", i, p.Labels, p.Annotations)
			}
		}
	}
	// The draw reaches every outcome often enough to mean something.
	t.Logf("decisions of %d pods under %d configurations: %v", pods, len(configs), decisions)
	for o, least := range map[Outcome]int{Ignore: 1000, Wait: 1000, Quit: 1000, Replace: 100} {
		if decisions[o] < least {
			t.Errorf("only %d random pods decided %v", decisions[o], o)
		}
	}
}

// TestInputsAreSmall: a valid pod with ten apps of twenty rules of 255 exit
// codes each (row 8 of the README's attacks, 261 KiB of event) carries one
// rule of one code per app.
func TestInputsAreSmall(t *testing.T) {
	onFailure := corev1.ContainerRestartPolicyOnFailure
	p := &slim.Pod{Meta: slim.Meta{Name: "p", Namespace: "ns", UID: "u"}, Spec: slim.Spec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: slim.Containers{{Name: keys.ProxyContainer}}},
		Status: slim.Status{ContainerStatuses: slim.Statuses{{Name: keys.ProxyContainer, State: slim.State{Running: &slim.Running{}}}}}}
	for i := range 10 {
		c := slim.Container{Name: "app-" + string(rune('a'+i)), RestartPolicy: &onFailure}
		for j := range slim.MaxRules {
			codes := slim.Codes{}
			for v := range slim.MaxExitCodes {
				codes = append(codes, int32((v+j)%256))
			}
			c.RestartPolicyRules = append(c.RestartPolicyRules, slim.Rule{Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &slim.ExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpNotIn, Values: codes}})
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, slim.ContainerStatus{Name: c.Name,
			State: slim.State{Terminated: &slim.Terminated{ExitCode: 0}}})
	}
	in := Inputs(p)
	rules := 0
	for _, c := range in.Spec.Containers {
		rules += len(c.RestartPolicyRules)
		for _, r := range c.RestartPolicyRules {
			if len(r.ExitCodes.Values) != 1 {
				t.Errorf("%s keeps %d exit codes", c.Name, len(r.ExitCodes.Values))
			}
		}
	}
	if rules > 10 {
		t.Errorf("%d rules kept for 10 apps", rules)
	}
	if Decide(in, Options{}) != Decide(p, Options{}) {
		t.Error("the inputs decide otherwise")
	}
}
