package proxyquit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// The quit's record: every quit leaves its ProxyQuit Event on the pod, or
// is counted unwritten and logged with the pod's name, whatever the API
// server does and however soon the function is stopped. These tests run
// the function as NewFromConfig wires it, against an API server of its own
// (fakekube_test.go).

// TestBurstThenShutdownLeavesEveryEvent: a burst of quits, the function
// told to stop while they are under way (Knative scaling it to zero right
// after a burst), and an API server slow to take Events (a quarter of a
// second each): once the function has stopped (Serve returned, Close
// done), every quit has its ProxyQuit Event.
func TestBurstThenShutdownLeavesEveryEvent(t *testing.T) {
	const n = 32
	var pods []*corev1.Pod
	for i := range n {
		pods = append(pods, donePod(fmt.Sprintf("burst-%d", i), fmt.Sprintf("uid-%d", i)))
	}
	k := newFakeKube(t, pods...)
	k.answer = func(_ http.ResponseWriter, r *http.Request, _ *corev1.Event, _ int) bool {
		select { // the API server's latency, not a synchronisation
		case <-time.After(250 * time.Millisecond):
		case <-r.Context().Done():
		}
		return false
	}
	// Every quit waits for the others: a burst, all under way at once.
	started, all := make(chan struct{}, n), make(chan struct{})
	exec := &fakeExecer{hook: func(context.Context, execCall) (ExecOutput, error) {
		started <- struct{}{}
		<-all
		return ExecOutput{}, nil
	}}
	w := newWired(t, &rest.Config{Host: k.url}, exec)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(w.ctx)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- Serve(sctx, l, w.fn.HTTPHandler(w.ctx, w.reg)) }()
	codes := make(chan string, n)
	for _, p := range pods {
		e := newEvent(t, p)
		go func() { codes <- deliverHTTP(w.ctx, "http://"+l.Addr().String(), e) }()
	}
	deadline := time.After(30 * time.Second)
	for range n {
		select {
		case <-started:
		case <-deadline:
			close(all)
			t.Fatal("the burst's quits did not all start within 30 s")
		}
	}

	stop() // SIGTERM, with every quit of the burst under way
	close(all)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	w.fn.Close(w.ctx)

	for range n {
		if got := <-codes; got != "200 quit" {
			t.Errorf("a quit of the burst was answered %q, want 200 quit", got)
		}
	}
	written := k.written(names.ReasonProxyQuit)
	var missing []string
	for _, p := range pods {
		if written[p.Name] != 1 {
			missing = append(missing, fmt.Sprintf("%s (%d)", p.Name, written[p.Name]))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d pods do not have exactly one ProxyQuit Event once the function stopped: %v; counted unwritten: %v",
			len(missing), n, missing, w.unwritten(t, map[string]string{"reason": names.ReasonProxyQuit}))
	}
}

// TestEventWhoseFirstWriteFailsIsWritten: an API server that fails the
// first write of an Event (gone for a moment, overloaded, etcd slow) gets
// it again, and the Event is on the pod once the function has stopped.
func TestEventWhoseFirstWriteFailsIsWritten(t *testing.T) {
	tests := map[string]func(http.ResponseWriter){
		"connection dropped": dropConnection,
		"503 without Retry-After": func(w http.ResponseWriter) {
			writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "apiserver is shutting down")
		},
		"500 etcd timeout": func(w http.ResponseWriter) {
			writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "etcdserver: request timed out")
		},
		"504 timeout": func(w http.ResponseWriter) {
			writeStatus(w, http.StatusGatewayTimeout, metav1.StatusReasonTimeout, "the server was unable to return a response in the time allotted")
		},
	}
	for name, fail := range tests {
		t.Run(name, func(t *testing.T) {
			pod := donePod("job-1", "uid-1")
			k := newFakeKube(t, pod)
			k.answer = func(w http.ResponseWriter, _ *http.Request, _ *corev1.Event, try int) bool {
				if try == 1 {
					fail(w)
					return true
				}
				return false
			}
			w := newWired(t, &rest.Config{Host: k.url}, &fakeExecer{})

			if code := codeOf(t, w.fn.Handle(w.ctx, newEvent(t, pod))); code != http.StatusOK {
				t.Errorf("code %d, want 200", code)
			}
			w.fn.Close(w.ctx)

			if got := k.written(names.ReasonProxyQuit)["job-1"]; got != 1 {
				t.Errorf("%d ProxyQuit Events on the pod once the function stopped, want 1 (unwritten: %v)",
					got, w.unwritten(t, nil))
			}
		})
	}
}

// TestUnwrittenEventIsCountedAndLogged: a quit's Event that cannot be
// written (refused for good, or failing past its deadline) is counted in
// istio_aux_proxyquit_events_unwritten_total and an error logged with the
// pod's name. The quit, whose Event is written before its exec, is not
// made while the API server fails (503: delivered again); one refused for
// good, which no delivery could write, is made without it.
func TestUnwrittenEventIsCountedAndLogged(t *testing.T) {
	tests := map[string]struct {
		answer func(http.ResponseWriter)
		cause  string
		code   int
		execs  int
	}{
		"refused for good": {func(w http.ResponseWriter) {
			writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, `events is forbidden: User "system:serviceaccount:istio-aux:istio-aux-proxyquit" cannot create resource "events"`)
		}, unwrittenRejected, http.StatusOK, 1},
		"failing past its deadline": {func(w http.ResponseWriter) {
			writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "etcd is down")
		}, unwrittenTimeout, http.StatusServiceUnavailable, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod := donePod("job-1", "uid-1")
			k := newFakeKube(t, pod)
			k.answer = func(w http.ResponseWriter, _ *http.Request, _ *corev1.Event, _ int) bool {
				tc.answer(w)
				return true
			}
			exec := &fakeExecer{}
			w := newWired(t, &rest.Config{Host: k.url}, exec)
			w.fn.eventTimeout = 300 * time.Millisecond

			if code := codeOf(t, w.fn.Handle(w.ctx, newEvent(t, pod))); code != tc.code {
				t.Errorf("code %d, want %d", code, tc.code)
			}
			if calls := exec.Calls(); len(calls) != tc.execs {
				t.Errorf("exec calls %v, want %d", calls, tc.execs)
			}
			w.fn.Close(w.ctx)

			if got := w.unwritten(t, map[string]string{"reason": names.ReasonProxyQuit, "cause": tc.cause}); got != 1 {
				t.Errorf("istio_aux_proxyquit_events_unwritten_total{reason=ProxyQuit,cause=%s} = %v, want 1", tc.cause, got)
			}
			var logged bool
			for _, e := range w.logs.FilterLevelExact(zapcore.ErrorLevel).All() {
				f := e.ContextMap()
				if f["name"] == "job-1" && f["namespace"] == testNS && f["reason"] == names.ReasonProxyQuit && f["cause"] == tc.cause {
					logged = true
				}
			}
			if !logged {
				t.Errorf("no error logged with the pod's name, the Event's reason and the cause %s; the log: %v", tc.cause, logLines(w))
			}
		})
	}
}

// TestFailedQuitsEventDeletedThroughTheAPI: wired as in a cluster, a quit
// whose exec fails for good while the proxy runs leaves the pod its
// ProxyQuitFailed Warning and no ProxyQuit: the one written before the
// exec is deleted through the events client.
func TestFailedQuitsEventDeletedThroughTheAPI(t *testing.T) {
	pod := donePod("job-1", "uid-1")
	k := newFakeKube(t, pod)
	w := newWired(t, &rest.Config{Host: k.url}, &fakeExecer{hook: func(context.Context, execCall) (ExecOutput, error) {
		return ExecOutput{}, utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: 3}
	}})

	if code := codeOf(t, w.fn.Handle(w.ctx, newEvent(t, pod))); code != http.StatusUnprocessableEntity {
		t.Errorf("code %d, want 422", code)
	}
	w.fn.Close(w.ctx)

	k.mu.Lock()
	deletes := k.deletes
	k.mu.Unlock()
	if quit, failed := k.written(names.ReasonProxyQuit)["job-1"], k.written(names.ReasonProxyQuitFailed)["job-1"]; quit != 0 || failed != 1 || deletes != 1 {
		t.Errorf("%d ProxyQuit and %d ProxyQuitFailed Events on the pod after %d deletes, want 0, 1 after 1 (unwritten: %v)",
			quit, failed, deletes, w.unwritten(t, nil))
	}
}

// TestEventNotHeldByTheReadsRateLimit: the pod and namespace reads have a
// rate limit that hundreds of events under way can spend; a quit's Event
// is written on a budget of its own, not behind them.
func TestEventNotHeldByTheReadsRateLimit(t *testing.T) {
	pod := donePod("job-1", "uid-1")
	k := newFakeKube(t, pod)
	// The quit's own reads of its pod and namespace get through; after
	// them the reads' budget is spent (hundreds of reads queued).
	spent := &spentLimiter{left: 2}
	w := newWired(t, &rest.Config{Host: k.url, RateLimiter: spent}, &fakeExecer{})

	if code := codeOf(t, w.fn.Handle(w.ctx, newEvent(t, pod))); code != http.StatusOK {
		t.Errorf("code %d, want 200", code)
	}
	w.fn.Close(w.ctx)

	if got := k.written(names.ReasonProxyQuit)["job-1"]; got != 1 {
		t.Errorf("%d ProxyQuit Events once the function stopped, want 1: the Event waited behind the reads", got)
	}
}

// TestQuitAnswersOnceItsEventIsWritten: the answer to a quit (which acks
// the message) waits for its Event: when the API server takes the Event
// late, the request waits, and the Event is there when it is answered.
func TestQuitAnswersOnceItsEventIsWritten(t *testing.T) {
	pod := donePod("job-1", "uid-1")
	k := newFakeKube(t, pod)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	k.answer = func(_ http.ResponseWriter, r *http.Request, _ *corev1.Event, _ int) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return false
	}
	w := newWired(t, &rest.Config{Host: k.url}, &fakeExecer{})
	t.Cleanup(func() { w.fn.Close(w.ctx) })
	handled := make(chan cloudevents.Result, 1)
	go func() { handled <- w.fn.Handle(w.ctx, newEvent(t, pod)) }()

	select {
	case <-k.arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("no Event write reached the API server within 30 s")
	}
	select {
	case res := <-handled:
		t.Fatalf("answered (%v) while its Event's write was under way", res)
	default:
	}
	once.Do(func() { close(release) })
	select {
	case res := <-handled:
		if code := codeOf(t, res); code != http.StatusOK {
			t.Errorf("code %d, want 200", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("not answered within 30 s of the Event's write")
	}
	if got := k.written(names.ReasonProxyQuit)["job-1"]; got != 1 {
		t.Errorf("%d ProxyQuit Events when the quit was answered, want 1", got)
	}
}

// deliverHTTP delivers e to the function at url as the dispatcher does (binary
// mode) and returns the status and body, or the error.
func deliverHTTP(ctx context.Context, url string, e cloudevents.Event) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(e.Data())))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range map[string]string{"ce-specversion": "1.0", "ce-type": e.Type(), "ce-id": e.ID(), "ce-source": e.Source(), "ce-subject": e.Subject()} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var body strings.Builder
	buf := make([]byte, 512)
	for {
		n, err := resp.Body.Read(buf)
		body.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(body.String()))
}

// spentLimiter lets left requests through, then holds every other one
// until its context ends: a rate limit spent by others.
type spentLimiter struct {
	mu   sync.Mutex
	left int
}

func (l *spentLimiter) take() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left > 0 {
		l.left--
		return true
	}
	return false
}

func (l *spentLimiter) TryAccept() bool { return l.take() }
func (l *spentLimiter) Accept()         { select {} }
func (l *spentLimiter) Stop()           {}
func (l *spentLimiter) QPS() float32    { return 1 }
func (l *spentLimiter) Wait(ctx context.Context) error {
	if l.take() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func logLines(w *wired) []string {
	var out []string
	for _, e := range w.logs.All() {
		out = append(out, fmt.Sprintf("%s %s %v", e.Level, e.Message, e.ContextMap()))
	}
	return out
}
