package serving

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestStopAnswersWhatIsUnderWay: a request under way when the context ends
// is answered, a new connection is refused, and Serve returns after both.
func TestStopAnswersWhatIsUnderWay(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(started)
		<-release
		_, _ = io.WriteString(w, "done")
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	quiet := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, srv, l, Stop{Quiet: func() { close(quiet) }, Drain: 10 * time.Second}) }()
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + l.Addr().String())
		if err != nil {
			answer <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer <- string(b)
	}()
	<-started
	cancel()
	<-quiet
	close(release)
	if got := <-answer; got != "done" {
		t.Errorf("the request under way got %q, want its answer", got)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve = %v after a graceful stop", err)
	}
	if _, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		t.Error("a new connection was taken after the stop")
	}
}

// TestDrainBoundCutsOff: past Drain, a request that does not finish is cut
// off and Serve returns.
func TestDrainBoundCutsOff(t *testing.T) {
	started := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // never answers; ends when its connection is cut
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, srv, l, Stop{Drain: 100 * time.Millisecond}) }()
	go func() {
		if resp, err := http.Get("http://" + l.Addr().String()); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return past its drain bound")
	}
}
