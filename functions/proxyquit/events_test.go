package proxyquit

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

// gatedSink is an API server's events endpoint that answers only once
// released.
type gatedSink struct {
	release chan struct{}
	mu      sync.Mutex
	reasons []string
}

func (s *gatedSink) write(e *corev1.Event) (*corev1.Event, error) {
	<-s.release
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reasons = append(s.reasons, e.Reason)
	return e, nil
}

func (s *gatedSink) Create(e *corev1.Event) (*corev1.Event, error) { return s.write(e) }
func (s *gatedSink) Update(e *corev1.Event) (*corev1.Event, error) { return s.write(e) }
func (s *gatedSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	return s.write(e)
}

func (s *gatedSink) written() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reasons...)
}

// TestCloseWritesTheLastEvents: the Events of the quits made just before
// the process stops are written before Close returns; client-go's Shutdown
// alone drops the ones it has not written yet.
func TestCloseWritesTheLastEvents(t *testing.T) {
	sink := &gatedSink{release: make(chan struct{})}
	l, rec := newEventLog(sink, corev1.EventSource{Component: Component}, scheme.Scheme)
	for i := range 3 {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job-" + string(rune('a'+i)), UID: "uid"}}
		rec.Eventf(pod, corev1.EventTypeNormal, ReasonProxyQuit, "Quit istio-proxy: %s", "test")
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
}

// TestCloseGivesUpAtItsDeadline: an API server that never answers holds
// Close only until its deadline, and Close says what was not written.
func TestCloseGivesUpAtItsDeadline(t *testing.T) {
	sink := &gatedSink{release: make(chan struct{})}
	t.Cleanup(func() { close(sink.release) })
	l, rec := newEventLog(sink, corev1.EventSource{Component: Component}, scheme.Scheme)
	rec.Eventf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job", UID: "uid"}},
		corev1.EventTypeNormal, ReasonProxyQuit, "Quit istio-proxy")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := l.flush(ctx)
	if err == nil || !strings.Contains(err.Error(), "1 of 1 Kubernetes Events not written") {
		t.Errorf("flush = %v, want the one Event left unwritten", err)
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
