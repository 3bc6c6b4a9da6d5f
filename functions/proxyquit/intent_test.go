package proxyquit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	k8stesting "k8s.io/client-go/testing"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/istio-aux/istio-aux/internal/kube"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// Issue 43: every quit leaves its ProxyQuit Event. The Event is the quit's
// intent, written before the exec: a function that dies right after the
// exec (its node powered off) has left it, and a quit that did not happen
// takes it back.

// died is the panic of a function's process that dies where it stands
// (its node powered off): nothing after it runs.
type died struct{}

// handleUntilDeath handles e; dead says whether the process died on the way.
func handleUntilDeath(h *harness, e cloudevents.Event) (res cloudevents.Result, dead bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(died); !ok {
				panic(r)
			}
			dead = true
		}
	}()
	return h.fn.Handle(context.Background(), e), false
}

// quitEventName is the name of pod's one ProxyQuit Event.
func quitEventName(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	e, err := newEventLog(nil, kube.Scheme).makeEvent(pod, true, corev1.EventTypeNormal, names.ReasonProxyQuit, "")
	if err != nil {
		t.Fatal(err)
	}
	return e.Name
}

func proxyExitedPod(name, uid string) *corev1.Pod {
	return podSpec{name: name, uid: uid, policy: corev1.RestartPolicyNever, apps: []string{"app"},
		states: map[string]corev1.ContainerState{"app": exited(0)}, proxy: exited(0)}.pod()
}

// TestQuitEventIsWrittenBeforeTheExec: the quit's ProxyQuit Event is on the
// pod when the quit command is exec'd, so a function that dies right
// after the exec, before anything else, leaves the quit its record.
func TestQuitEventIsWrittenBeforeTheExec(t *testing.T) {
	done := donePod("job-1", "uid-1")
	h := newHarness(t, DefaultConfig(), optedIn, done)
	var atExec []string
	h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
		atExec = h.events()
		h.setPod(t, proxyExitedPod("job-1", "uid-1")) // the quit went through
		panic(died{})
	}

	if _, dead := handleUntilDeath(h, newEvent(t, done)); !dead {
		t.Fatal("the function did not reach the exec")
	}

	if want := []string{"Normal ProxyQuit Quit istio-proxy: all apps terminated"}; !slices.Equal(atExec, want) {
		t.Errorf("Kubernetes Events at the exec %q, want %q", atExec, want)
	}
	if got := h.quitEvents()["job-1"]; got != 1 {
		t.Errorf("%d ProxyQuit Events once the function died, want 1", got)
	}
}

// TestRedeliveryAfterADeathLeavesOneQuitEvent: the function dies in the
// middle of a quit and the message is delivered again (it was never
// acked). Whatever the redelivery finds, the pod ends with its one
// ProxyQuit Event.
func TestRedeliveryAfterADeathLeavesOneQuitEvent(t *testing.T) {
	for name, tc := range map[string]struct {
		// quit: whether the first delivery's exec quit the proxy before
		// the function died.
		quit               bool
		wantCode           int
		wantOut            Outcome
		wantExecs          int
		wantQuitEventTries int
	}{
		// Issue 43: the redelivery reads the proxy stopped and has
		// nothing to do; the record is the Event written before the exec.
		"died right after the exec": {quit: true, wantCode: 200, wantOut: OutcomeIgnored, wantExecs: 1, wantQuitEventTries: 1},
		// The Event was written, the exec never made: the redelivery
		// finds the Event there (AlreadyExists, written) and quits.
		"died between the Event and the exec": {quit: false, wantCode: 200, wantOut: OutcomeQuit, wantExecs: 2, wantQuitEventTries: 2},
	} {
		t.Run(name, func(t *testing.T) {
			done := donePod("job-1", "uid-1")
			h := newHarness(t, DefaultConfig(), optedIn, done)
			execs := 0
			h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
				execs++
				if execs == 1 && !tc.quit {
					panic(died{}) // before the exec reached the proxy
				}
				h.setPod(t, proxyExitedPod("job-1", "uid-1"))
				if execs == 1 {
					panic(died{})
				}
				return ExecOutput{}, nil
			}
			e := newEvent(t, done)
			if _, dead := handleUntilDeath(h, e); !dead {
				t.Fatal("the first delivery did not reach the exec")
			}

			res, dead := handleUntilDeath(h, e)

			if dead {
				t.Fatal("the redelivery died")
			}
			if code := codeOf(t, res); code != tc.wantCode {
				t.Errorf("redelivery: code %d, want %d (%v)", code, tc.wantCode, res)
			}
			if got := h.count(e.Type(), tc.wantOut); got != 1 {
				t.Errorf("redelivery: outcome %s counted %v times, want 1 (%v)", tc.wantOut, got, res)
			}
			if got := len(h.exec.Calls()); got != tc.wantExecs {
				t.Errorf("%d execs, want %d", got, tc.wantExecs)
			}
			if got := h.quitEvents()["job-1"]; got != 1 {
				t.Errorf("%d ProxyQuit Events on the pod, want 1; Events: %q", got, h.events())
			}
			tries := 0
			for _, c := range h.kube.log() {
				if c == "create "+quitEventName(t, done) {
					tries++
				}
			}
			if tries != tc.wantQuitEventTries {
				t.Errorf("%d writes of the ProxyQuit Event, want %d (calls %v)", tries, tc.wantQuitEventTries, h.kube.log())
			}
		})
	}
}

// TestFailedQuitTakesItsEventBack: an exec that fails while the proxy
// still runs did not quit it: the ProxyQuit Event written before the exec
// is deleted, by its name, and the ProxyQuitFailed Warning written.
func TestFailedQuitTakesItsEventBack(t *testing.T) {
	for name, tc := range map[string]struct {
		err      error
		wantCode int
		want     string
	}{
		"the quit command exits with a code of its own": {
			err:      fmt.Errorf("exec: %w", utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: 3}),
			wantCode: 422, want: "Warning ProxyQuitFailed Quitting istio-proxy failed for good (exit_code)",
		},
		"the exec policy denies the exec": {
			err: fmt.Errorf("exec: %w", &httpstream.UpgradeFailureError{Cause: apierrors.NewForbidden(schema.GroupResource{Resource: "pods/exec"},
				"job-1", errors.New("ValidatingAdmissionPolicy denied request"))}),
			wantCode: 422, want: "Warning ProxyQuitFailed Quitting istio-proxy failed for good (denied)",
		},
		"the API server refuses the exec for now": {
			err:      fmt.Errorf("exec: %w", &httpstream.UpgradeFailureError{Cause: apierrors.NewServiceUnavailable("the kubelet is not answering")}),
			wantCode: 500, want: "Warning ProxyQuitFailed Quitting istio-proxy failed (will retry)",
		},
	} {
		t.Run(name, func(t *testing.T) {
			done := donePod("job-1", "uid-1")
			h := newHarness(t, DefaultConfig(), optedIn, done)
			var atExec map[string]int
			h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
				atExec = h.quitEvents()
				return ExecOutput{}, tc.err
			}

			res := h.fn.Handle(context.Background(), newEvent(t, done))

			if code := codeOf(t, res); code != tc.wantCode {
				t.Errorf("code %d, want %d (%v)", code, tc.wantCode, res)
			}
			if atExec["job-1"] != 1 {
				t.Errorf("%d ProxyQuit Events at the exec, want 1", atExec["job-1"])
			}
			if got := h.events(); len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
				t.Errorf("Kubernetes Events left %q, want one %q", got, tc.want)
			}
			name := quitEventName(t, done)
			calls := h.kube.log()
			del := slices.Index(calls, "delete "+name)
			if del < 0 || !slices.ContainsFunc(calls[del:], func(c string) bool { return c != "delete "+name && strings.HasPrefix(c, "create ") }) {
				t.Errorf("Event calls %v, want the delete of %s, then the ProxyQuitFailed's create", calls, name)
			}
		})
	}
}

// TestMaybeQuitKeepsItsEvent: an exec that fails in a way that may be the
// quit itself (here it times out: a loaded node, Envoy slow to answer)
// while the kubelet has not yet reported the proxy stopped keeps its
// ProxyQuit Event and is answered 500. The redelivery settles it: it finds
// the proxy stopped (the Event is the quit's record: before, the Event was
// deleted and the pod of a completed Job was left with only its
// ProxyQuitFailed), or quits the proxy under the same Event, or takes the
// Event back when its own exec fails for sure.
func TestMaybeQuitKeepsItsEvent(t *testing.T) {
	for name, tc := range map[string]struct {
		stopped   bool  // the proxy stopped after the first exec, reported late
		redeliver error // the redelivery's exec error, if it execs
		wantOut   Outcome
		wantExecs int
		wantQuit  int // ProxyQuit Events left
	}{
		"the proxy stopped, reported late":         {stopped: true, wantOut: OutcomeIgnored, wantExecs: 1, wantQuit: 1},
		"the proxy still runs; the retry quits it": {wantOut: OutcomeQuit, wantExecs: 2, wantQuit: 1},
		"the proxy still runs; the retry fails for sure": {
			redeliver: utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: 3},
			wantOut:   OutcomeFailedFinal, wantExecs: 2, wantQuit: 0,
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ExecTimeout = 20 * time.Millisecond
			done := donePod("job-1", "uid-1")
			h := newHarness(t, cfg, optedIn, done)
			execs := 0
			h.exec.hook = func(ctx context.Context, _ execCall) (ExecOutput, error) {
				execs++
				if execs == 1 {
					<-ctx.Done()
					return ExecOutput{}, fmt.Errorf("stream: %w", ctx.Err())
				}
				return ExecOutput{}, tc.redeliver
			}
			e := newEvent(t, done)

			res := h.fn.Handle(context.Background(), e)

			if code := codeOf(t, res); code != http.StatusInternalServerError {
				t.Fatalf("first delivery: code %d, want 500 (%v)", code, res)
			}
			if got := h.quitEvents()["job-1"]; got != 1 {
				t.Errorf("%d ProxyQuit Events after the first delivery, want it kept (1); Events %q", got, h.events())
			}
			if tc.stopped {
				h.setPod(t, proxyExitedPod("job-1", "uid-1"))
			}

			res = h.fn.Handle(context.Background(), e)

			if got := h.count(e.Type(), tc.wantOut); got != 1 {
				t.Errorf("redelivery: outcome %s counted %v times, want 1 (%v)", tc.wantOut, got, res)
			}
			if execs != tc.wantExecs {
				t.Errorf("%d execs, want %d", execs, tc.wantExecs)
			}
			if got := h.quitEvents()["job-1"]; got != tc.wantQuit {
				t.Errorf("%d ProxyQuit Events left, want %d; Events %q", got, tc.wantQuit, h.events())
			}
		})
	}
}

// TestSecondDeliveryFindsTheProxyStopped: a delivery of a pod's quit whose
// exec the runtime refuses because istio-proxy has already stopped (another
// delivery quit it; the kubelet has not reported it yet) keeps the pod's
// ProxyQuit Event: it watches the pod for the stop, and answers 200 once it
// sees it, or 500 with the Event kept while the status still lags.
func TestSecondDeliveryFindsTheProxyStopped(t *testing.T) {
	refused := fmt.Errorf("exec: %w", &httpstream.UpgradeFailureError{Cause: apierrors.NewInternalError(
		errors.New("error executing command in container: container is in CONTAINER_EXITED state"))})
	for name, tc := range map[string]struct {
		reported bool // the kubelet reports the stop within the watch
		wantCode int
		wantOut  Outcome
	}{
		"the stop reported within the watch": {reported: true, wantCode: http.StatusOK, wantOut: OutcomeGone},
		"the status still lags":              {wantCode: http.StatusInternalServerError, wantOut: OutcomeFailed},
	} {
		t.Run(name, func(t *testing.T) {
			done := donePod("job-1", "uid-1")
			h := newHarness(t, DefaultConfig(), optedIn, done)
			h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
				return ExecOutput{}, refused
			}
			// The event's read and the first read after the refusal see
			// the proxy running; when the kubelet reports the stop, the
			// next reads see it stopped.
			reads := 0
			h.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				if reads++; reads < 3 || !tc.reported {
					return true, done.DeepCopy(), nil
				}
				return true, proxyExitedPod("job-1", "uid-1"), nil
			})
			e := newEvent(t, done)

			res := h.fn.Handle(context.Background(), e)

			if code := codeOf(t, res); code != tc.wantCode {
				t.Errorf("code %d, want %d (%v)", code, tc.wantCode, res)
			}
			if got := h.count(e.Type(), tc.wantOut); got != 1 {
				t.Errorf("outcome %s counted %v times, want 1 (%v)", tc.wantOut, got, res)
			}
			if got := h.quitEvents()["job-1"]; got != 1 {
				t.Errorf("%d ProxyQuit Events, want the one written before the exec kept; Events %q", got, h.events())
			}
		})
	}
}

// TestQuitEventNotTakenBack: a delete of a failed quit's ProxyQuit Event
// that the API server refuses for good leaves the Event on the pod: it is
// counted (cause undeleted), and the answer is the failure's.
func TestQuitEventNotTakenBack(t *testing.T) {
	done := donePod("job-1", "uid-1")
	h := newHarness(t, DefaultConfig(), optedIn, done)
	h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
		return ExecOutput{}, utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: 3}
	}
	h.kube.del = func(name string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, name, errors.New("cannot delete resource events"))
	}

	res := h.fn.Handle(context.Background(), newEvent(t, done))

	if code := codeOf(t, res); code != http.StatusUnprocessableEntity {
		t.Errorf("code %d, want 422 (%v)", code, res)
	}
	if got := counterValue(h.metrics.eventsUnwritten.WithLabelValues(names.ReasonProxyQuit, unwrittenUndeleted)); got != 1 {
		t.Errorf("events_unwritten_total{reason=ProxyQuit,cause=undeleted} = %v, want 1", got)
	}
	if got := h.events(); len(got) != 2 {
		t.Errorf("Kubernetes Events %q, want the ProxyQuit left and the ProxyQuitFailed", got)
	}
}

// TestQuitWhoseEventIsUnwritten: a quit whose ProxyQuit Event fails past
// its deadline (the API server failing) is not made: no exec, 503
// (delivered again later). One refused for good (here RBAC) could not be
// written by any delivery, so it does not hold the Job up: the quit is
// made, once. Either way the Event is counted unwritten once, with its
// cause (the refused one is not tried again after the exec), and none is
// written.
func TestQuitWhoseEventIsUnwritten(t *testing.T) {
	for name, tc := range map[string]struct {
		refuse  error
		code    int
		outcome Outcome
		execs   int
		cause   string
	}{
		"failing past its deadline": {apierrors.NewServiceUnavailable("etcd is down"),
			http.StatusServiceUnavailable, OutcomeError, 0, unwrittenTimeout},
		"refused for good": {apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "",
			errors.New(`User "system:serviceaccount:istio-aux:istio-aux-proxyquit" cannot create resource "events"`)),
			http.StatusOK, OutcomeQuit, 1, unwrittenRejected},
	} {
		t.Run(name, func(t *testing.T) {
			done := donePod("job-1", "uid-1")
			h := newHarness(t, DefaultConfig(), optedIn, done)
			h.fn.eventTimeout = 300 * time.Millisecond
			h.kube.create = func(*corev1.Event) error { return tc.refuse }
			e := newEvent(t, done)

			res := h.fn.Handle(context.Background(), e)

			if code := codeOf(t, res); code != tc.code {
				t.Errorf("code %d, want %d (%v)", code, tc.code, res)
			}
			if got := h.count(e.Type(), tc.outcome); got != 1 {
				t.Errorf("outcome %s counted %v times, want 1 (%v)", tc.outcome, got, res)
			}
			if calls := h.exec.Calls(); len(calls) != tc.execs {
				t.Errorf("exec calls %v, want %d", calls, tc.execs)
			}
			if got := counterValue(h.metrics.eventsUnwritten.WithLabelValues(names.ReasonProxyQuit, tc.cause)); got != 1 {
				t.Errorf("events_unwritten_total{reason=ProxyQuit,cause=%s} = %v, want 1", tc.cause, got)
			}
			if got := h.events(); len(got) != 0 {
				t.Errorf("Kubernetes Events %q, want none", got)
			}
		})
	}
}

// TestCallerGoneDuringTheQuitEvent: a caller that gave up while the quit's
// Event was being written gets no exec on its behalf: it delivers the
// event again, and that delivery quits (the Event is there already).
func TestCallerGoneDuringTheQuitEvent(t *testing.T) {
	done := donePod("job-1", "uid-1")
	h := newHarness(t, DefaultConfig(), optedIn, done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.kube.create = func(*corev1.Event) error {
		cancel()
		return nil
	}

	res := h.fn.Handle(ctx, newEvent(t, done))

	if code := codeOf(t, res); code != http.StatusServiceUnavailable {
		t.Errorf("code %d, want 503 (%v)", code, res)
	}
	if calls := h.exec.Calls(); len(calls) != 0 {
		t.Errorf("exec calls %v, want none", calls)
	}
	if got := h.quitEvents()["job-1"]; got != 1 {
		t.Errorf("%d ProxyQuit Events, want the one written", got)
	}
}
