package decision

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// randomPod draws a pod from the cases the decision tells apart: proxies
// classic and native, extra and annotated sidecars, every pod and container
// restart policy, rules with every operator and action (and unknown ones),
// every container state, opt-in values valid and not.
func randomPod(r *rand.Rand) *slim.Pod {
	pick := func(n int) int { return r.IntN(n) }
	policies := []*corev1.ContainerRestartPolicy{nil, ptr(corev1.ContainerRestartPolicyAlways),
		ptr(corev1.ContainerRestartPolicyOnFailure), ptr(corev1.ContainerRestartPolicyNever)}
	operators := []corev1.ContainerRestartRuleOnExitCodesOperator{corev1.ContainerRestartRuleOnExitCodesOpIn,
		corev1.ContainerRestartRuleOnExitCodesOpNotIn, "Between"}
	actions := []corev1.ContainerRestartRuleAction{corev1.ContainerRestartRuleActionRestart,
		corev1.ContainerRestartRuleActionRestartAllContainers, "Explode"}
	rules := func() slim.Rules {
		var out slim.Rules
		for range pick(4) {
			rule := slim.Rule{Action: actions[pick(len(actions))]}
			if pick(5) > 0 {
				rule.ExitCodes = &slim.ExitCodes{Operator: operators[pick(len(operators))]}
				for range pick(4) {
					rule.ExitCodes.Values = append(rule.ExitCodes.Values, int32(pick(4)))
				}
			}
			out = append(out, rule)
		}
		return out
	}
	state := func() slim.State {
		switch pick(7) {
		case 0:
			return slim.State{Running: &slim.Running{}}
		case 1:
			return slim.State{Waiting: &slim.Waiting{Reason: "CrashLoopBackOff"}}
		case 2:
			return slim.State{}
		}
		return slim.State{Terminated: &slim.Terminated{ExitCode: int32(pick(4)), Reason: "Error"}}
	}
	values := []string{"", "true", "false", " TRUE ", "maybe"}
	p := &slim.Pod{Meta: slim.Meta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "9"},
		Spec:   slim.Spec{RestartPolicy: []corev1.RestartPolicy{"", corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever, corev1.RestartPolicyNever}[pick(5)]},
		Status: slim.Status{Phase: []corev1.PodPhase{corev1.PodRunning, corev1.PodRunning, corev1.PodPending, corev1.PodSucceeded}[pick(4)]}}
	if pick(10) == 0 {
		p.DeletionTimestamp = &metav1.Time{}
	}
	if v := values[pick(len(values))]; v != "" {
		p.Labels = slim.Kept{keys.LabelEnabled: v}
	}
	p.Annotations = slim.Kept{}
	if v := values[pick(len(values))]; v != "" {
		p.Annotations[keys.AnnotationEnabled] = v
	}
	if pick(3) == 0 {
		p.Annotations[keys.AnnotationSidecars] = []string{"b", " c , b", "x,,a"}[pick(3)]
	}
	names := []string{"istio-proxy", "a", "b", "c"}
	for _, n := range names[:1+pick(len(names))] {
		if n == "istio-proxy" && pick(3) == 0 {
			p.Spec.InitContainers = append(p.Spec.InitContainers, slim.Container{Name: n, RestartPolicy: policies[pick(len(policies))], RestartPolicyRules: rules()})
			if pick(4) > 0 {
				p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, slim.ContainerStatus{Name: n, State: state()})
			}
			continue
		}
		p.Spec.Containers = append(p.Spec.Containers, slim.Container{Name: n, RestartPolicy: policies[pick(len(policies))], RestartPolicyRules: rules()})
		if pick(5) > 0 {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, slim.ContainerStatus{Name: n, RestartCount: int32(pick(3)), State: state()})
		}
	}
	if pick(4) == 0 { // an init container that is not the proxy
		p.Spec.InitContainers = append(p.Spec.InitContainers, slim.Container{Name: "setup", RestartPolicyRules: rules()})
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, slim.ContainerStatus{Name: "setup", State: state()})
	}
	return p
}

func ptr[T any](v T) *T { return &v }

// TestInputsDecideAlike: for 20,000 random pods and every configuration,
// the decision and the opt-in read from Inputs(p) are those read from p.
func TestInputsDecideAlike(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	configs := []Options{{}, {QuitNative: true}, {ExtraSidecars: []string{"b"}}, {ExtraSidecars: []string{"a", "c"}, QuitNative: true}}
	nsLabels := []map[string]string{nil, {keys.LabelEnabled: "true"}}
	decisions := map[Outcome]int{}
	for i := range 20_000 {
		p := randomPod(r)
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
	for _, o := range []Outcome{Ignore, Wait, Quit} {
		if decisions[o] < 1000 {
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
