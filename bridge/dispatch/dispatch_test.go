package dispatch_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/publish"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// handler records what reaches the sink and answers with a scripted status
// per pod name and delivery attempt (200 once the script runs out).
type handler struct {
	mu     sync.Mutex
	script map[string][]int
	seen   map[string][]string // pod name -> event ids, in delivery order
}

func newHandler(script map[string][]int) *handler {
	return &handler{script: script, seen: map[string][]string{}}
}

func (h *handler) Handle(_ context.Context, e cloudevents.Event) cloudevents.Result {
	pod, err := podevent.Decode(e)
	if err != nil {
		return cehttp.NewResult(http.StatusBadRequest, "%v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen[pod.Name] = append(h.seen[pod.Name], e.ID())
	code := http.StatusOK
	if s := h.script[pod.Name]; len(s) > 0 {
		code, h.script[pod.Name] = s[0], s[1:]
	}
	return cehttp.NewResult(code, "scripted %d", code)
}

func (h *handler) deliveries(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen[name])
}

func pod(name, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: rv}}
}

type env struct {
	pending sync.WaitGroup
	srv     *testenv.Server
	js      jetstream.JetStream
	d       *dispatch.Dispatcher
	pub     *publish.Publisher
	bm      *metrics.Bridge
	dm      *metrics.Dispatch
	ctx     context.Context
	stats   func() uint64
	stop    func() // cancels Run's context and waits for Run to return
}

func start(t *testing.T, sink dispatch.Sink) *env {
	t.Helper()
	return startWith(t, sink, transport.ConsumerOptions{MaxAckPending: 8, MaxDeliver: 5, AckWait: 5 * time.Second})
}

func startWith(t *testing.T, sink dispatch.Sink, consumer transport.ConsumerOptions) *env {
	t.Helper()
	return startIn(t, testenv.Context(t), sink, dispatch.Options{
		Consumer:  consumer,
		BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond,
	})
}

// startIn starts the stack with ctx's logger and the dispatcher options o.
func startIn(t *testing.T, parent context.Context, sink dispatch.Sink, o dispatch.Options) *env {
	t.Helper()
	srv := testenv.StartServer(t)
	ctx, cancel := context.WithCancel(parent)
	nc := testenv.Connect(t, srv.URL())
	js, err := publish.NewJetStream(nc, 64)
	if err != nil {
		t.Fatal(err)
	}
	st, err := transport.Ensure(ctx, js, transport.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, js: js, bm: metrics.NewBridge(nil), dm: metrics.NewDispatch(nil), ctx: ctx}
	e.pub = publish.New(nc, js, e.bm, transport.DefaultName, 64)
	go func() { _ = e.pub.Run(ctx) }()
	e.stats = func() uint64 {
		info, err := st.Info(ctx)
		if err != nil {
			return 1 << 63
		}
		return info.State.Msgs
	}
	e.d = dispatch.New(js, sink, e.dm, o)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.d.Run(ctx) }()
	e.stop = func() { cancel(); <-done }
	t.Cleanup(e.stop)
	return e
}

// publishAsync sends the event for p; waitPublished waits for the acks.
func (e *env) publishAsync(t *testing.T, p *corev1.Pod) {
	t.Helper()
	ev, err := podevent.New("test", slim.Of(p))
	if err != nil {
		t.Fatal(err)
	}
	e.pending.Add(1)
	done := func(err error) {
		if err != nil {
			t.Error(err)
		}
		e.pending.Done()
	}
	for {
		err := e.pub.Publish(e.ctx, &ev, "", done)
		if err == nil {
			return
		}
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) && !strings.Contains(err.Error(), jetstream.ErrTooManyStalledMsgs.Error()) {
			t.Fatal(err)
		}
	}
}

func (e *env) waitPublished(*testing.T) { e.pending.Wait() }

// publish sends the event for p and waits for its ack.
func (e *env) publish(t *testing.T, p *corev1.Pod) {
	t.Helper()
	ev, err := podevent.New("test", slim.Of(p))
	if err != nil {
		t.Fatal(err)
	}
	acked := make(chan error, 1)
	if err := e.pub.Publish(e.ctx, &ev, "", func(err error) { acked <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-acked; err != nil {
		t.Fatal(err)
	}
}

func TestPublishDispatchEndToEnd(t *testing.T) {
	h := newHandler(map[string][]int{
		"flaky":    {http.StatusServiceUnavailable, http.StatusInternalServerError},
		"poison":   {http.StatusBadRequest},
		"notfound": {http.StatusNotFound},
	})
	e := start(t, dispatch.SinkFunc(h.Handle))

	e.publish(t, pod("ok", "1"))
	e.publish(t, pod("ok", "1")) // same id: deduplicated by JetStream
	e.publish(t, pod("flaky", "1"))
	e.publish(t, pod("poison", "1"))
	e.publish(t, pod("notfound", "1"))

	testenv.Eventually(t, 5*time.Second, "the work queue to drain", func() bool {
		return e.stats() == 0 && h.deliveries("flaky") == 3 && h.deliveries("notfound") == 2
	})
	for name, want := range map[string]int{"ok": 1, "flaky": 3, "poison": 1, "notfound": 2} {
		if got := h.deliveries(name); got != want {
			t.Errorf("%s delivered %d times, want %d", name, got, want)
		}
	}
	if got := testutil.ToFloat64(e.bm.Deduplicated); got != 1 {
		t.Errorf("deduplicated = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.bm.Published); got != 4 {
		t.Errorf("published = %v, want 4", got)
	}
	if got := testutil.ToFloat64(e.dm.Poison.WithLabelValues("rejected")); got != 1 {
		t.Errorf("poison = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.dm.Redeliveries); got != 3 {
		t.Errorf("redeliveries = %v, want 3 (2 for flaky, 1 for notfound)", got)
	}
	if got := testutil.ToFloat64(e.dm.Delivered.WithLabelValues("5xx")); got != 2 {
		t.Errorf("5xx deliveries = %v, want 2", got)
	}
	// A newer state of the same pod is a new id, so it is delivered again.
	e.publish(t, pod("ok", "2"))
	testenv.Eventually(t, 5*time.Second, "the new state", func() bool { return h.deliveries("ok") == 2 })
}

func TestPoisonMessageIsTerminated(t *testing.T) {
	h := newHandler(nil)
	e := start(t, dispatch.SinkFunc(h.Handle))
	nc := testenv.Connect(t, e.srv.URL())
	if err := nc.Publish(transport.Subject("ns", "p"), []byte("not a cloudevent")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the poison metric", func() bool {
		return testutil.ToFloat64(e.dm.Poison.WithLabelValues("decode")) == 1
	})
	testenv.Eventually(t, 5*time.Second, "the message to leave the stream", func() bool { return e.stats() == 0 })
	if len(h.seen) != 0 {
		t.Errorf("the sink saw %v", h.seen)
	}
}

func TestExhaustedAfterMaxDeliver(t *testing.T) {
	h := newHandler(map[string][]int{"down": {500, 500, 500, 500, 500, 500, 500}})
	e := start(t, dispatch.SinkFunc(h.Handle))
	e.publish(t, pod("down", "1"))
	testenv.Eventually(t, 5*time.Second, "MaxDeliver attempts", func() bool {
		return testutil.ToFloat64(e.dm.Exhausted) == 1 && e.stats() == 0
	})
	if got := h.deliveries("down"); got != 5 {
		t.Errorf("delivered %d times, want MaxDeliver = 5", got)
	}
}

func TestHTTPSink(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r)
		n := len(got)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	sink, err := dispatch.NewHTTPSink(srv.URL, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, sink)
	e.publish(t, pod("web", "7"))
	testenv.Eventually(t, 5*time.Second, "delivery over HTTP", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2 && e.stats() == 0
	})
	mu.Lock()
	defer mu.Unlock()
	r := got[1]
	if r.Header.Get("Ce-Id") != "uid-web/7" || r.Header.Get("Ce-Type") != podevent.TypePodUpdated ||
		r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("not a binary-mode CloudEvent: %v", r.Header)
	}
}

func TestHTTPSinkUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	sink, err := dispatch.NewHTTPSink(url, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := podevent.New("test", slim.Of(pod("x", "1")))
	if a, class := dispatch.Classify(sink.Send(context.Background(), ev)); a != dispatch.Nak || class != "error" {
		t.Errorf("connection refused classified %v/%s, want nak/error", a, class)
	}
}

// A delivery that outlasts AckWait is not handed to anyone else while it is
// still in flight (the dispatcher reports progress), so it runs once.
func TestSlowDeliveryIsNotRedelivered(t *testing.T) {
	const ackWait = 300 * time.Millisecond
	var calls atomic.Int32
	sink := dispatch.SinkFunc(func(ctx context.Context, _ cloudevents.Event) cloudevents.Result {
		calls.Add(1)
		select { // several AckWaits
		case <-time.After(4 * ackWait):
		case <-ctx.Done():
		}
		return nil
	})
	e := startWith(t, sink, transport.ConsumerOptions{MaxAckPending: 8, MaxDeliver: 5, AckWait: ackWait})
	e.publish(t, pod("slow", "1"))
	testenv.Eventually(t, 10*time.Second, "the slow delivery to be acked", func() bool { return e.stats() == 0 })
	if n := calls.Load(); n != 1 {
		t.Errorf("sink called %d times, want 1", n)
	}
	if n := testutil.ToFloat64(e.dm.Redeliveries); n != 0 {
		t.Errorf("%v redeliveries, want 0", n)
	}
}

// TestDeliveryUnderWayFinishesOnShutdown: a replica told to stop while a
// delivery is under way lets it finish, with a context that is still live,
// and acks it, instead of cutting it between the quit and its record (the
// quit done, its Event lost, the redelivery finding nothing left to do).
func TestDeliveryUnderWayFinishesOnShutdown(t *testing.T) {
	called, release := make(chan struct{}), make(chan struct{})
	var cut atomic.Bool
	var once sync.Once
	sink := dispatch.SinkFunc(func(ctx context.Context, _ cloudevents.Event) cloudevents.Result {
		once.Do(func() { close(called) })
		<-release
		cut.Store(ctx.Err() != nil)
		return nil
	})
	e := start(t, sink)
	e.publish(t, pod("busy", "1"))
	select {
	case <-called:
	case <-time.After(10 * time.Second):
		t.Fatal("the event never reached the sink")
	}
	stopped := make(chan struct{})
	go func() { e.stop(); close(stopped) }()
	// Run's context is cancelled (stop returns only after Run does); the
	// delivery is released only then.
	testenv.Eventually(t, 10*time.Second, "Run's context to be cancelled", func() bool { return e.ctx.Err() != nil })
	close(release)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the delivery under way finished")
	}
	if cut.Load() {
		t.Error("the delivery under way had its context cancelled by the shutdown")
	}
	st, err := e.js.Stream(context.Background(), transport.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("%d messages left in the stream: the delivery that finished during the shutdown was not acked", info.State.Msgs)
	}
}

// TestConsumerIsRestored: the durable consumer deleted under a running
// dispatcher (by hand, or NATS reinstalled without its volume) is re-created
// — readiness is false meanwhile — and delivery goes on.
func TestConsumerIsRestored(t *testing.T) {
	h := newHandler(nil)
	e := start(t, dispatch.SinkFunc(h.Handle))
	e.publish(t, pod("before", "1"))
	testenv.Eventually(t, 10*time.Second, "the first delivery", func() bool { return h.deliveries("before") == 1 })
	if err := e.js.DeleteConsumer(e.ctx, transport.DefaultName, transport.Durable); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the consumer re-created", func() bool {
		_, err := e.js.Consumer(e.ctx, transport.DefaultName, transport.Durable)
		return err == nil && testutil.ToFloat64(e.dm.ConsumerRestores) >= 1 && e.d.Running()
	})
	e.publish(t, pod("after", "2"))
	testenv.Eventually(t, 10*time.Second, "delivery after the restore", func() bool { return h.deliveries("after") == 1 })
}

// TestPendingGauge: the Pending gauge follows the consumer's count of events
// not yet delivered: held back by a window of one while the sink blocks,
// then none once it answers.
func TestPendingGauge(t *testing.T) {
	release := make(chan struct{})
	sink := dispatch.SinkFunc(func(ctx context.Context, _ cloudevents.Event) cloudevents.Result {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return cehttp.NewResult(http.StatusOK, "ok")
	})
	e := startIn(t, testenv.Context(t), sink, dispatch.Options{
		Consumer:     transport.ConsumerOptions{MaxAckPending: 1, MaxDeliver: 5, AckWait: 5 * time.Second},
		PendingEvery: 10 * time.Millisecond,
	})
	for _, name := range []string{"a", "b", "c"} {
		e.publish(t, pod(name, "1"))
	}
	testenv.Eventually(t, 5*time.Second, "two events pending behind the one in delivery", func() bool {
		return testutil.ToFloat64(e.dm.Pending) == 2
	})
	close(release)
	testenv.Eventually(t, 5*time.Second, "no event pending", func() bool {
		return testutil.ToFloat64(e.dm.Pending) == 0 && e.stats() == 0
	})
}
