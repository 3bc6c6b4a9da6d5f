package proxyquit

import (
	"context"
	"errors"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	apiwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// gatedSink is an API server's events endpoint that answers only once
// released, or fails when the write's context ends.
type gatedSink struct {
	release chan struct{}
	mu      sync.Mutex
	names   map[string]string // reason by name
}

func newGatedSink() *gatedSink {
	return &gatedSink{release: make(chan struct{}), names: map[string]string{}}
}

// wait holds a call until the gate opens or its context ends.
func (s *gatedSink) wait(ctx context.Context) error {
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *gatedSink) CreateEvent(ctx context.Context, e *corev1.Event) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.names[e.Name]; ok {
		return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "events"}, e.Name)
	}
	s.names[e.Name] = e.Reason
	return nil
}

func (s *gatedSink) DeleteEvent(ctx context.Context, _, name string) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.names[name]; !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "events"}, name)
	}
	delete(s.names, name)
	return nil
}

func (s *gatedSink) written() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Values(s.names))
}

// lostEvents collects what an eventLog gives up.
type lostEvents struct {
	mu   sync.Mutex
	seen []string // "name reason cause"
}

func (l *lostEvents) lost(e *corev1.Event, cause string, _ error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, e.InvolvedObject.Name+" "+e.Reason+" "+cause)
}

func (l *lostEvents) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
}

// TestCloseWritesTheLastEvents: the Events recorded in the background
// just before the process stops are written before Close returns.
func TestCloseWritesTheLastEvents(t *testing.T) {
	sink := newGatedSink()
	l := newEventLog(sink, scheme.Scheme)
	var lost lostEvents
	l.lost = lost.lost
	for _, name := range []string{"a", "b", "c"} {
		l.Eventf(testPod(name), corev1.EventTypeNormal, "SettingsApplied", "applied %s", name)
	}
	go close(sink.release) // the API server answers whenever it does
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sink.written(); len(got) != 3 {
		t.Errorf("%d Events written when Close returned (%v), want 3", len(got), got)
	}
	if got := lost.all(); len(got) != 0 {
		t.Errorf("Events given up: %v", got)
	}
}

// eventSinkFunc is an events endpoint that hands each Event to a func.
type eventSinkFunc func(context.Context, *corev1.Event) error

func (f eventSinkFunc) CreateEvent(ctx context.Context, e *corev1.Event) error { return f(ctx, e) }

func (f eventSinkFunc) DeleteEvent(context.Context, string, string) error {
	return errors.New("eventSinkFunc: no delete")
}

// TestEventsNameTheFunction: the function's Events say who wrote them,
// names.SourceProxyQuit as their source.component and reportingController
// (where client-go's recorder writes its reporter): kubectl istio-aux takes
// an Event with the function's reasons for istio-aux's only when it names
// that reporter (one a tenant wrote does not).
func TestEventsNameTheFunction(t *testing.T) {
	var got *corev1.Event
	l := newEventLog(eventSinkFunc(func(_ context.Context, e *corev1.Event) error { got = e; return nil }), scheme.Scheme)
	if err := l.EventAndWait(context.Background(), testPod("job"), true, corev1.EventTypeNormal, names.ReasonProxyQuit, "Quit istio-proxy"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Source.Component != names.SourceProxyQuit || got.ReportingController != names.SourceProxyQuit {
		t.Errorf("Event written %+v; want source.component and reportingController %s", got, names.SourceProxyQuit)
	}
}

// TestCloseGivesUpAtItsDeadline: an API server that never answers holds
// Close only until its deadline; each Event left, written in the
// background or waited for by a request the drain cut off, is given up
// once, as lost at shutdown.
func TestCloseGivesUpAtItsDeadline(t *testing.T) {
	sink := newGatedSink()
	t.Cleanup(func() { close(sink.release) })
	l := newEventLog(sink, scheme.Scheme)
	var lost lostEvents
	l.lost = lost.lost
	l.Eventf(testPod("settings"), corev1.EventTypeNormal, "SettingsApplied", "applied")
	waited := make(chan error, 1)
	go func() {
		waited <- l.EventAndWait(context.Background(), testPod("job"), true, corev1.EventTypeNormal, names.ReasonProxyQuit, "Quit istio-proxy")
	}()
	// Both writes are under way once the log tracks two.
	if err := apiwait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.pending) == 2, nil
	}); err != nil {
		t.Fatal("the two writes never got under way")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := l.flush(ctx)
	if err == nil || !strings.Contains(err.Error(), "2 Kubernetes Events not written") {
		t.Errorf("flush = %v, want the two Events left unwritten", err)
	}
	want := []string{"job ProxyQuit shutdown", "settings SettingsApplied shutdown"}
	if got := lost.all(); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Errorf("given up: %v, want %v", got, want)
	}
	select {
	case err := <-waited:
		t.Errorf("the request's write ended (%v) at Close's deadline; it has a deadline of its own", err)
	default:
	}
}

// TestEventWrittenOnce: a pod's ProxyQuit Event is written once, however
// many deliveries write it (a redelivery, a second replica): the second
// finds it there, which is written, not lost. Other Events add up.
func TestEventWrittenOnce(t *testing.T) {
	sink := newGatedSink()
	close(sink.release)
	l := newEventLog(sink, scheme.Scheme)
	var lost lostEvents
	l.lost = lost.lost
	ctx := context.Background()
	for range 2 {
		if err := l.EventAndWait(ctx, testPod("job"), true, corev1.EventTypeNormal, names.ReasonProxyQuit, "Quit istio-proxy"); err != nil {
			t.Fatal(err)
		}
		if err := l.EventAndWait(ctx, testPod("job"), false, corev1.EventTypeWarning, names.ReasonProxyQuitFailed, "will retry"); err != nil {
			t.Fatal(err)
		}
	}
	// Another pod of the same name (re-created) has its own.
	if err := l.EventAndWait(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job", UID: "uid-2"}},
		true, corev1.EventTypeNormal, names.ReasonProxyQuit, "Quit istio-proxy"); err != nil {
		t.Fatal(err)
	}
	want := []string{names.ReasonProxyQuit, names.ReasonProxyQuit, names.ReasonProxyQuitFailed, names.ReasonProxyQuitFailed}
	if got := sink.written(); !slices.Equal(got, want) {
		t.Errorf("written %v, want %v", got, want)
	}
	if got := lost.all(); len(got) != 0 {
		t.Errorf("given up: %v", got)
	}
}

// answeringSink is an events endpoint whose deletes are answered by
// deleteAnswers, in turn (then let through); it holds the Events written.
type answeringSink struct {
	*gatedSink
	deleteAnswers []error
	deletes       int
}

func (s *answeringSink) DeleteEvent(ctx context.Context, ns, name string) error {
	s.mu.Lock()
	s.deletes++
	var answer error
	if len(s.deleteAnswers) > 0 {
		answer, s.deleteAnswers = s.deleteAnswers[0], s.deleteAnswers[1:]
	}
	s.mu.Unlock()
	if answer != nil {
		return answer
	}
	return s.gatedSink.DeleteEvent(ctx, ns, name)
}

// TestDeleteOnceEvent: the Event of a pod's reason written once is
// deleted by its name: tried again while the API server cannot take it
// now, done when it is not there, and counted as lost (undeleted) when
// refused for good.
func TestDeleteOnceEvent(t *testing.T) {
	gr := schema.GroupResource{Resource: "events"}
	for name, tc := range map[string]struct {
		answers   []error
		written   bool
		wantErr   bool
		wantTries int
	}{
		"written, deleted":         {written: true, wantTries: 1},
		"never written: done":      {wantTries: 1},
		"503 then deleted":         {answers: []error{apierrors.NewServiceUnavailable("etcd is down")}, written: true, wantTries: 2},
		"refused for good: undone": {answers: []error{apierrors.NewForbidden(gr, "", errors.New("cannot delete resource events"))}, written: true, wantErr: true, wantTries: 1},
	} {
		t.Run(name, func(t *testing.T) {
			sink := &answeringSink{gatedSink: newGatedSink(), deleteAnswers: tc.answers}
			close(sink.release)
			l := newEventLog(sink, scheme.Scheme)
			var lost lostEvents
			l.lost = lost.lost
			ctx := context.Background()
			pod := testPod("job")
			if tc.written {
				if err := l.EventAndWait(ctx, pod, true, corev1.EventTypeNormal, names.ReasonProxyQuit, "Quit istio-proxy"); err != nil {
					t.Fatal(err)
				}
			}
			// Another reason's Event of the pod is not touched.
			if err := l.EventAndWait(ctx, pod, false, corev1.EventTypeWarning, names.ReasonProxyQuitFailed, "will retry"); err != nil {
				t.Fatal(err)
			}

			err := l.DeleteAndWait(ctx, pod, names.ReasonProxyQuit)

			if (err != nil) != tc.wantErr {
				t.Errorf("DeleteAndWait = %v, want an error: %v", err, tc.wantErr)
			}
			want := []string{names.ReasonProxyQuitFailed}
			var wantLost []string
			if tc.wantErr {
				want = []string{names.ReasonProxyQuit, names.ReasonProxyQuitFailed}
				wantLost = []string{"job ProxyQuit " + unwrittenUndeleted}
			}
			if got := sink.written(); !slices.Equal(got, want) {
				t.Errorf("Events left %v, want %v", got, want)
			}
			if got := lost.all(); !slices.Equal(got, wantLost) {
				t.Errorf("given up: %v, want %v", got, wantLost)
			}
			if sink.deletes != tc.wantTries {
				t.Errorf("%d deletes, want %d", sink.deletes, tc.wantTries)
			}
		})
	}
}

func TestOnceEventName(t *testing.T) {
	long := strings.Repeat("a", 62) + "." + strings.Repeat("b", 62) + "." + strings.Repeat("c", 62) + "." + strings.Repeat("d", 62)
	for name, ref := range map[string]*corev1.ObjectReference{
		"a Job's pod":           {Namespace: "ns", Name: "train-x7k2p", UID: "8f0c"},
		"the longest pod name":  {Namespace: "ns", Name: long, UID: "8f0c"},
		"cut before a dot":      {Namespace: "ns", Name: strings.Repeat("a", 236) + ".b", UID: "8f0c"},
		"no uid (a named pod)":  {Namespace: "ns", Name: "job"},
		"a name with a hyphen-": {Namespace: "ns", Name: strings.Repeat("a", 235) + "-bb", UID: "8f0c"},
	} {
		t.Run(name, func(t *testing.T) {
			n := onceEventName(ref, names.ReasonProxyQuit)
			if errs := validation.NameIsDNSSubdomain(n, false); len(errs) > 0 {
				t.Errorf("%q: %v", n, errs)
			}
			if n != onceEventName(ref.DeepCopy(), names.ReasonProxyQuit) {
				t.Error("not the same name for the same pod")
			}
			other := ref.DeepCopy()
			other.UID = "another"
			if n == onceEventName(other, names.ReasonProxyQuit) || n == onceEventName(ref, names.ReasonProxyQuitFailed) {
				t.Error("the same name for another pod or reason")
			}
		})
	}
}

func TestRetryable(t *testing.T) {
	gr := schema.GroupResource{Resource: "events"}
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"connection lost":        {errors.New(`Post "https://10.96.0.1/api/v1/namespaces/ns/events": EOF`), true},
		"a try's timeout":        {context.DeadlineExceeded, true},
		"429":                    {apierrors.NewTooManyRequests("slow down", 1), true},
		"500 etcd":               {apierrors.NewInternalError(errors.New("etcdserver: request timed out")), true},
		"503":                    {apierrors.NewServiceUnavailable("apiserver is shutting down"), true},
		"504":                    {apierrors.NewTimeoutError("the server was unable to return a response", 0), true},
		"server timeout":         {apierrors.NewServerTimeout(gr, "create", 1), true},
		"403 RBAC":               {apierrors.NewForbidden(gr, "", errors.New("cannot create resource events")), false},
		"404 namespace gone":     {apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns"), false},
		"422 invalid":            {apierrors.NewInvalid(schema.GroupKind{Kind: "Event"}, "e", nil), false},
		"request not made":       {&rest.RequestConstructionError{Err: errors.New("bad body")}, false},
		"namespace being delete": {apierrors.NewForbidden(gr, "", errors.New("namespace ns is being terminated")), false},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("%s: retryable = %v, want %v", name, got, tc.want)
		}
	}
}

// TestServeAnswersRequestsUnderWay: told to stop, the function stops
// listening but returns only once the request under way is answered, so
// its quit's Event can still be written.
func TestServeAnswersRequestsUnderWay(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var answered atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(started)
		<-release
		answered.Store(true)
		w.WriteHeader(http.StatusOK)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, l, h) }()
	go func() {
		resp, err := http.Post("http://"+addr+"/", "text/plain", nil)
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	cancel()
	// Shutdown has begun once the listener refuses connections.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the server still listens 10 s after being told to stop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a request under way", err)
	default:
	}
	close(release)
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the request was answered")
	}
	if !answered.Load() {
		t.Error("Serve returned before the request under way was answered")
	}
}
