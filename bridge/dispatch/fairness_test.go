package dispatch_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// podIn is a pod of namespace ns.
func podIn(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + ns + "-" + name), ResourceVersion: "1"}}
}

// tenantSink is a function as a tenant's poison pods make it answer: after
// an exec's worth of time, a final 422 for most (a container named
// istio-proxy with no pilot-agent; a namespace the exec policy refuses), a
// 503 after a long wait for some (an exec that hangs until its deadline).
// Other namespaces' pods are quit (200) after the same exec time. It
// records when each legitimate event was handled.
type tenantSink struct {
	exec, hang time.Duration

	mu      sync.Mutex
	handled map[string]time.Time
}

func (s *tenantSink) Send(ctx context.Context, e cloudevents.Event) cloudevents.Result {
	pod, err := podevent.Decode(e)
	if err != nil {
		return cehttp.NewResult(http.StatusBadRequest, "%v", err)
	}
	wait, code := s.exec, http.StatusOK
	if pod.Namespace == "tenant" {
		code = http.StatusUnprocessableEntity
		if strings.HasPrefix(pod.Name, "hang") {
			wait, code = s.hang, http.StatusServiceUnavailable
		}
	}
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return ctx.Err()
	}
	if code == http.StatusOK {
		s.mu.Lock()
		s.handled[pod.Name] = time.Now()
		s.mu.Unlock()
	}
	return cehttp.NewResult(code, "scripted")
}

func (s *tenantSink) at(name string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.handled[name]
	return t, ok
}

// quitLatency publishes the event of pod name of namespace "team" and
// returns the time from its publish being stored to the function having
// handled it.
func quitLatency(t *testing.T, e *env, s *tenantSink, name string) time.Duration {
	t.Helper()
	start := time.Now()
	e.publish(t, podIn("team", name))
	var at time.Time
	testenv.Eventually(t, 30*time.Second, "the quit of "+name, func() bool {
		var ok bool
		at, ok = s.at(name)
		return ok
	})
	return at.Sub(start)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// TestPoisonPodsDoNotDelayOthers is row 1 of the README's attacks: a
// tenant's 1,000 pods whose quits cannot succeed (900 answered with a final
// 422, 100 whose exec hangs for a second and fails again and again) are
// published just before another namespace's Jobs finish. Two stacks with
// production settings run side by side, one with the poison pods and one
// without, and each Job finishes at both at the same moment, so that the
// load of this shared machine falls on both alike. The quits with the poison pods
// present must take no longer: the median of the pairs' ratios and the p50
// within 1.2x (p90 and p99 are printed; of 40 samples on this shared host
// they are its noise as much as anything).
func TestPoisonPodsDoNotDelayOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes a thousand events")
	}
	const samples = 40
	start := func(o dispatch.Options) (*env, *tenantSink) {
		s := &tenantSink{exec: 50 * time.Millisecond, hang: time.Second, handled: map[string]time.Time{}}
		// Errors only: a log line per poison event, written through the
		// test's logger, would be most of the CPU this run costs.
		ctx := logging.WithLogger(context.Background(), zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)).Sugar())
		return startIn(t, ctx, s, o), s
	}
	// Production settings (zero: the defaults), and the control: what the
	// dispatcher did before, one window of 64 shared by every namespace.
	idle, idleSink := start(dispatch.Options{})
	attacked, attackedSink := start(dispatch.Options{})
	control, controlSink := start(dispatch.Options{Workers: 64, PerNamespace: 64,
		Consumer: transport.ConsumerOptions{MaxAckPending: 64, MaxDeliver: 10, AckWait: 10 * time.Second}})
	for _, e := range []*env{attacked, control} {
		for i := range 1000 {
			name := fmt.Sprintf("poison-%d", i)
			if i%10 == 0 {
				name = fmt.Sprintf("hang-%d", i)
			}
			e.publishAsync(t, podIn("tenant", name))
		}
		e.waitPublished(t)
	}
	// Each sample quits one Job at both stacks at the same moment, so that
	// this shared host's hiccups fall on both alike.
	var without, with, before []time.Duration
	for i := range samples {
		name := fmt.Sprintf("job-%d", i)
		var a, b time.Duration
		var pair sync.WaitGroup
		pair.Go(func() { a = quitLatency(t, idle, idleSink, name) })
		pair.Go(func() { b = quitLatency(t, attacked, attackedSink, name) })
		pair.Wait()
		without, with = append(without, a), append(with, b)
		if i < 5 { // the control's first quits show the difference
			before = append(before, quitLatency(t, control, controlSink, name))
		}
	}
	if testutil.ToFloat64(attacked.dm.Final) == 0 {
		t.Error("no poison pod was recorded as a final failure")
	}
	waiting := testutil.ToFloat64(attacked.dm.Waiting) + testutil.ToFloat64(attacked.dm.InFlight)
	t.Logf("quit of another namespace's Job, publish → handled (exec 50 ms), %d samples each, in pairs at the same moment:", samples)
	for _, q := range []struct {
		name string
		p    float64
	}{{"p50", .5}, {"p90", .9}, {"p99", .99}} {
		a, b := percentile(without, q.p), percentile(with, q.p)
		t.Logf("  %s: no poison pods %v, 1,000 poison pods %v: %.2fx", q.name, a.Round(100*time.Microsecond), b.Round(100*time.Microsecond), float64(b)/float64(a))
	}
	// The gate: each pair's ratio, whose median a hiccup of this shared
	// host cannot move (a tail percentile of 40 samples is one sample).
	var ratios []time.Duration // per mille
	for i := range without {
		ratios = append(ratios, 1000*with[i]/without[i])
	}
	paired := float64(percentile(ratios, .5)) / 1000
	t.Logf("  median of the pairs' ratios: %.2fx", paired)
	t.Logf("  the tenant's events still held by the dispatcher at the end: %v; recorded as final: %v",
		waiting, testutil.ToFloat64(attacked.dm.Final))
	t.Logf("  control, one window of 64 for every namespace: first quit %v, p50 of the first five %v",
		before[0].Round(time.Millisecond), percentile(before, .5).Round(time.Millisecond))
	if before[0] < 5*percentile(without, .5) {
		t.Errorf("the control's first quit took %v: the scenario does not load the dispatcher", before[0])
	}
	if p50 := float64(percentile(with, .5)) / float64(percentile(without, .5)); paired > 1.2 || p50 > 1.2 {
		t.Errorf("with 1,000 poison pods the quits took %.2fx as long as without (p50 %.2fx), want ≤ 1.2x", paired, p50)
	}
}
