package publish_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/publish"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

func event(t *testing.T, name, rv string) cloudevents.Event {
	t.Helper()
	e, err := podevent.New("test", &slim.Pod{Meta: slim.Meta{Name: name, Namespace: "jobs", UID: "uid-" + "x", ResourceVersion: rv}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// stack is an embedded nats-server with the stream and a running
// publisher of at most maxPending unacknowledged events.
type stack struct {
	ctx context.Context
	srv *testenv.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	st  jetstream.Stream
	m   *metrics.Bridge
	p   *publish.Publisher
}

func startStack(t *testing.T, maxPending int) *stack {
	t.Helper()
	s := &stack{ctx: testenv.Context(t), srv: testenv.StartServer(t), m: metrics.NewBridge(nil)}
	s.nc = testenv.Connect(t, s.srv.URL())
	var err error
	if s.js, err = publish.NewJetStream(s.nc, maxPending); err != nil {
		t.Fatal(err)
	}
	if s.st, err = transport.Ensure(s.ctx, s.js, transport.DefaultName); err != nil {
		t.Fatal(err)
	}
	s.p = publish.New(s.nc, s.js, s.m, transport.DefaultName, maxPending)
	go func() { _ = s.p.Run(s.ctx) }()
	return s
}

func TestPublishStores(t *testing.T) {
	s := startStack(t, 4)
	ctx, st, m, p := s.ctx, s.st, s.m, s.p

	results := make(chan error, 3)
	for _, e := range []cloudevents.Event{event(t, "a", "1"), event(t, "b", "2"), event(t, "a", "1")} {
		if err := p.Publish(ctx, &e, "", func(err error) { results <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(m.Deduplicated); got != 1 {
		t.Errorf("deduplicated %v, want 1", got)
	}
	// The stored message is binary mode on the namespace's subject.
	msg, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "istio-aux.pods.jobs.a" || msg.Header.Get(jetstream.MsgIDHeader) != "uid-x/1" || msg.Header.Get("ce-id") != "uid-x/1" {
		t.Errorf("stored %s with headers %v", msg.Subject, msg.Header)
	}
}

func TestPublishWhileDisconnected(t *testing.T) {
	s := startStack(t, 4)
	ctx, srv, nc, m, p := s.ctx, s.srv, s.nc, s.m, s.p
	srv.Shutdown()
	testenv.Eventually(t, 5*time.Second, "disconnect", func() bool { return !nc.IsConnected() })
	e := event(t, "a", "1")
	err := p.Publish(ctx, &e, "", func(error) { t.Error("done called for an unsent event") })
	if !errors.Is(err, publish.ErrNotConnected) {
		t.Errorf("Publish while down = %v, want ErrNotConnected", err)
	}
	if got := testutil.ToFloat64(m.PublishErrors.WithLabelValues("publish")); got != 1 {
		t.Errorf("publish errors %v, want 1", got)
	}
}

// TestPublishRestoresADeletedStream: NATS reinstalled without its volume (or
// the stream deleted by hand) loses the stream; the publish that finds it
// gone fails (the caller retries it), the stream is re-created with a
// warning, and the retry is stored.
func TestPublishRestoresADeletedStream(t *testing.T) {
	s := startStack(t, 4)
	ctx, js, m, p := s.ctx, s.js, s.m, s.p
	publishOnce := func(name string) error {
		e := event(t, name, "1")
		done := make(chan error, 1)
		if err := p.Publish(ctx, &e, "", func(err error) { done <- err }); err != nil {
			return err
		}
		return <-done
	}
	if err := publishOnce("a"); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, transport.DefaultName); err != nil {
		t.Fatal(err)
	}
	if err := publishOnce("b"); err == nil {
		t.Fatal("a publish to a deleted stream succeeded")
	}
	testenv.Eventually(t, 5*time.Second, "the stream re-created", func() bool {
		_, err := js.Stream(ctx, transport.DefaultName)
		return err == nil && testutil.ToFloat64(m.StreamRestores) == 1
	})
	if err := publishOnce("b"); err != nil {
		t.Fatalf("the retried publish: %v", err)
	}
}

// TestStreamKeepsOneEventPerPod: a flood of states of one pod (1,000, as a
// pod whose status churns, or a publisher gone mad) leaves one message in
// the stream, the newest, next to the other pods' own.
func TestStreamKeepsOneEventPerPod(t *testing.T) {
	s := startStack(t, 64)
	ctx, st, p := s.ctx, s.st, s.p
	results := make(chan error, 1001)
	send := func(name, rv string) {
		e := event(t, name, rv)
		for {
			err := p.Publish(ctx, &e, "", func(err error) { results <- err })
			if err == nil {
				return
			}
			if !strings.Contains(err.Error(), jetstream.ErrTooManyStalledMsgs.Error()) {
				t.Fatal(err)
			}
		}
	}
	for i := range 1000 {
		send("flood", strconv.Itoa(i+1))
	}
	send("quiet", "5000") // an id of its own: the events of this test share a uid
	for range 1001 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("stream holds %d messages after 1,000 states of one pod and one of another, want 2", info.State.Msgs)
	}
	last, err := st.GetLastMsgForSubject(ctx, transport.Subject("jobs", "flood"))
	if err != nil {
		t.Fatal(err)
	}
	if id := last.Header.Get("ce-id"); id != "uid-x/1000" {
		t.Errorf("kept %s, want the newest state uid-x/1000", id)
	}
}
