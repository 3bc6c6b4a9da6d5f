// Package decisiontest holds test fixtures for pkg/decision and its users:
// the random pods that the decision's and the bridge's packed cache's
// property tests draw.
package decisiontest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// RandomPod draws a slim pod from the cases the decision (and a packing of
// its inputs) tells apart: proxies classic and native, extra and annotated
// sidecars (past slim.MaxSidecars too), every pod and container restart
// policy, rules with every operator and action (and unknown ones), every
// container state, statuses missing, repeated or of no container, opt-in
// values valid and not, beside the sidecars annotation or alone, Istio
// CNI's istio-validation passed, running or failed (now or before).
func RandomPod(r *rand.Rand) *slim.Pod {
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
			return slim.State{Running: &slim.Running{StartedAt: metav1.Unix(1, 0)}}
		case 1:
			return slim.State{Waiting: &slim.Waiting{Reason: "CrashLoopBackOff"}}
		case 2:
			return slim.State{}
		}
		return slim.State{Terminated: &slim.Terminated{ExitCode: int32(pick(4)), Reason: "Error"}}
	}
	labels := []string{"", "true", "True", "false", "FALSE", "maybe"}
	annotations := []string{"", "true", "false", " TRUE ", "maybe"}
	p := &slim.Pod{APIVersion: "v1", Kind: "Pod", Meta: slim.Meta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "9"},
		Spec:   slim.Spec{RestartPolicy: []corev1.RestartPolicy{"", corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever, corev1.RestartPolicyNever}[pick(5)]},
		Status: slim.Status{Phase: []corev1.PodPhase{corev1.PodRunning, corev1.PodRunning, corev1.PodPending, corev1.PodSucceeded}[pick(4)]}}
	if pick(10) == 0 {
		p.DeletionTimestamp = &metav1.Time{}
	}
	if v := labels[pick(len(labels))]; v != "" {
		p.Labels = slim.Kept{keys.LabelEnabled: v}
	}
	if pick(2) == 0 { // an empty map, or none
		p.Annotations = slim.Kept{}
	}
	annotate := func(key, value string) {
		if p.Annotations == nil {
			p.Annotations = slim.Kept{}
		}
		p.Annotations[key] = value
	}
	if v := annotations[pick(len(annotations))]; v != "" {
		annotate(keys.AnnotationEnabled, v)
	}
	switch pick(4) {
	case 0:
		annotate(keys.AnnotationSidecars, []string{"b", " c , b", "x,,a", "a,b,c"}[pick(4)])
	case 1: // the names past slim.MaxSidecars are not sidecars
		var names []string
		for i := range slim.MaxSidecars + 2 {
			names = append(names, fmt.Sprintf("n%d", i))
		}
		names = append(names, "c")
		if pick(2) == 0 {
			names = append([]string{"b"}, names...)
		}
		annotate(keys.AnnotationSidecars, strings.Join(names, ","))
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
	if pick(3) == 0 { // Istio CNI's check, perhaps failed (the start race)
		v := slim.ContainerStatus{Name: keys.ValidationContainer, State: state()}
		if pick(2) == 0 {
			v.State = slim.State{Terminated: &slim.Terminated{ExitCode: keys.ValidationFailedCode, Reason: "Error"}}
		}
		if code := []int32{0, keys.ValidationFailedCode, keys.ValidationFailedCode, 1}[pick(4)]; code != 0 {
			v.LastState.Terminated = &slim.LastTerminated{ExitCode: code}
		}
		p.Spec.InitContainers = append([]slim.Container{{Name: keys.ValidationContainer}}, p.Spec.InitContainers...)
		p.Status.InitContainerStatuses = append([]slim.ContainerStatus{v}, p.Status.InitContainerStatuses...)
	}
	if pick(6) == 0 { // statuses the kubelet would not write: of no container, or twice
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, slim.ContainerStatus{Name: names[pick(len(names))], State: state()},
			slim.ContainerStatus{Name: "gone", State: state()})
		slices.Reverse(p.Status.ContainerStatuses)
	}
	return p
}

func ptr[T any](v T) *T { return &v }
