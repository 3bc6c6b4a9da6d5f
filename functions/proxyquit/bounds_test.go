package proxyquit

import (
	"context"
	"fmt"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// widePod is row 7 of the README's attacks: a valid pod whose 300 apps
// exited 0 beside a running istio-proxy, more apps than the decoder's bound.
func widePod() *corev1.Pod {
	var apps []string
	states := map[string]corev1.ContainerState{}
	for i := range slim.MaxContainers + 44 {
		name := fmt.Sprintf("app-%d", i)
		apps = append(apps, name)
		states[name] = exited(0)
	}
	return podSpec{name: "wide", uid: "uid-wide", policy: corev1.RestartPolicyNever, apps: apps, states: states, proxy: running}.pod()
}

// TestPodBeyondTheBoundsIsQuitLive: the bridge's event of such a pod names
// it only, and the function decides on the live pod: the proxy is quit.
func TestPodBeyondTheBoundsIsQuitLive(t *testing.T) {
	p := widePod()
	h := newHarness(t, DefaultConfig(), optedIn, p)
	e := newEvent(t, p)
	if !podevent.IdentityOnly(e) {
		t.Fatal("the bridge's event carries the whole pod")
	}
	res := h.fn.Handle(context.Background(), e)
	if code := codeOf(t, res); code != 200 || h.count(e.Type(), OutcomeQuit) != 1 {
		t.Fatalf("Handle = %v, want the quit", res)
	}
	if n := len(h.exec.Calls()); n != 1 {
		t.Errorf("%d execs, want 1", n)
	}
	if got := counterValue(h.metrics.beyondBounds.WithLabelValues("live")); got != 1 {
		t.Errorf("beyond_bounds{action=live} = %v, want 1", got)
	}
	// Not before its apps are done: the live pod decides.
	running := widePod()
	running.Status.ContainerStatuses[7].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	h.setPod(t, running)
	if res := h.fn.Handle(context.Background(), newEvent(t, running)); codeOf(t, res) != 200 || h.count(e.Type(), OutcomeWait) != 1 {
		t.Errorf("an app still running: %v, want wait", res)
	}
}

// TestApiServerSourcePodBeyondTheBounds: an ApiServerSource event carries
// the whole pod, which the decoder refuses (400); the pod gets a Warning
// Event saying so and the refusal is counted, with no API call.
func TestApiServerSourcePodBeyondTheBounds(t *testing.T) {
	p := widePod()
	h := newHarness(t, DefaultConfig(), optedIn, p)
	h.client.ClearActions()
	e := newEvent(t, p)
	e.SetType(podevent.TypeAPIServerUpdate)
	e.SetExtension(podevent.ExtIdentityOnly, nil)
	if err := e.SetData(cloudevents.ApplicationJSON, p); err != nil {
		t.Fatal(err)
	}
	if code := codeOf(t, h.fn.Handle(context.Background(), e)); code != 400 {
		t.Errorf("code %d, want 400", code)
	}
	events := strings.Join(h.events(), "\n")
	if !strings.Contains(events, "Warning ProxyQuitFailed istio-aux does not quit istio-proxy from this event") ||
		!strings.Contains(events, "more than 256 containers") {
		t.Errorf("Kubernetes Events %q", events)
	}
	if got := counterValue(h.metrics.beyondBounds.WithLabelValues("refused")); got != 1 {
		t.Errorf("beyond_bounds{action=refused} = %v, want 1", got)
	}
	if len(h.exec.Calls()) != 0 || len(h.client.Actions()) != 0 {
		t.Errorf("execs %v, API calls %v", h.exec.Calls(), h.client.Actions())
	}
}
