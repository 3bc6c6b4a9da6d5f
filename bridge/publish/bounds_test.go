package publish_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// donePod has apps apps with rules rules of codes exit codes each (none of
// them 0, so the pod decides Quit), all exited 0 beside a running
// istio-proxy, and names as long as the API allows (63).
func donePod(name string, apps, inits, rules, codes int) *slim.Pod {
	onFailure := corev1.ContainerRestartPolicyOnFailure
	long := func(prefix string, i int) string {
		return fmt.Sprintf("%s-%05d-%s", prefix, i, strings.Repeat("x", 63-len(prefix)-7))
	}
	p := &slim.Pod{APIVersion: "v1", Kind: "Pod",
		Meta: slim.Meta{Name: name, Namespace: "jobs", UID: types.UID("uid-" + name), ResourceVersion: "1",
			Annotations: slim.Kept{keys.AnnotationSidecars: strings.Repeat("not-a-container,", 16<<10)}},
		Spec:   slim.Spec{RestartPolicy: corev1.RestartPolicyNever, Containers: slim.Containers{{Name: keys.ProxyContainer}}},
		Status: slim.Status{ContainerStatuses: slim.Statuses{{Name: keys.ProxyContainer, State: slim.State{Running: &slim.Running{}}}}}}
	for i := range apps {
		c := slim.Container{Name: long("app", i), RestartPolicy: &onFailure}
		for j := range rules {
			r := slim.Rule{Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &slim.ExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn}}
			for v := range codes {
				r.ExitCodes.Values = append(r.ExitCodes.Values, int32(1+(v+j)%255))
			}
			c.RestartPolicyRules = append(c.RestartPolicyRules, r)
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, slim.ContainerStatus{Name: c.Name,
			State: slim.State{Terminated: &slim.Terminated{ExitCode: 0, Reason: strings.Repeat("r", 200)}}})
	}
	for i := range inits {
		p.Spec.InitContainers = append(p.Spec.InitContainers, slim.Container{Name: long("init", i), RestartPolicy: &onFailure})
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, slim.ContainerStatus{Name: long("init", i),
			State: slim.State{Terminated: &slim.Terminated{ExitCode: 0}}})
	}
	return p
}

// TestNoValidPodExceedsTheStream is rows 7 and 8 of the README's attacks:
// valid pods whose slim form is hundreds of KiB or MiB (restart rules at
// the API's limits, the most containers the decoder takes, more than that)
// make events the stream stores and the function decodes, deciding as the
// pod does.
func TestNoValidPodExceedsTheStream(t *testing.T) {
	s := startStack(t, 4)
	ctx, st, p := s.ctx, s.st, s.p
	for _, pod := range []*slim.Pod{
		donePod("row-8", 10, 0, slim.MaxRules, slim.MaxExitCodes),
		donePod("widest", slim.MaxContainers-1, slim.MaxContainers, slim.MaxRules, slim.MaxExitCodes),
		donePod("row-7", slim.MaxContainers+44, 0, 1, 1),
	} {
		e, err := podevent.New("src", pod)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		if err := p.Publish(ctx, &e, "", func(err error) { done <- err }); err != nil {
			t.Fatalf("%s: %v", pod.Name, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: the stream refused its event: %v", pod.Name, err)
		}
		stored, err := st.GetLastMsgForSubject(ctx, transport.Subject(pod.Namespace, pod.Name))
		if err != nil {
			t.Fatal(err)
		}
		back, err := transport.ReadEvent(ctx, &nats.Msg{Subject: stored.Subject, Header: stored.Header, Data: stored.Data})
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := podevent.Decode(*back)
		if err != nil {
			t.Fatalf("%s: the function would refuse its event: %v", pod.Name, err)
		}
		want := decision.Decide(pod, decision.Options{})
		got := decision.Decide(decoded, decision.Options{})
		if podevent.IdentityOnly(*back) {
			got = want // decided on the live pod, which is the pod itself
		}
		t.Logf("%s: %d apps, slim pod %d KiB as JSON; event %d bytes (identity only: %v), decides %v",
			pod.Name, len(pod.Spec.Containers)-1, jsonSize(t, pod)>>10, len(stored.Data), podevent.IdentityOnly(*back), want)
		if got != want {
			t.Errorf("%s: the event decides %v, the pod %v", pod.Name, got, want)
		}
	}

	// The control: row 8's pod as the bridge encoded it before (the whole
	// slim pod) is over the stream's limit, and refused.
	old, err := podevent.New("src", donePod("row-8-before", 10, 0, slim.MaxRules, slim.MaxExitCodes))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.SetData("application/json", donePod("row-8-before", 10, 0, slim.MaxRules, slim.MaxExitCodes)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	err = p.Publish(ctx, &old, "", func(err error) { done <- err })
	if err == nil {
		err = <-done
	}
	if err == nil {
		t.Errorf("the whole slim pod (%d bytes) was stored: the control does not exceed the stream", len(old.Data()))
	} else {
		t.Logf("control, the whole slim pod as before (%d KiB): %v", len(old.Data())>>10, err)
	}
}

func jsonSize(t *testing.T, v any) int {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}
