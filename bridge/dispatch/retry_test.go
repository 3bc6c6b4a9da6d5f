package dispatch_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/bridge/final"
	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// TestNakWithDelayHoldsItsSlot holds the reason retries are scheduled
// messages: nats-server keeps a message nak'ed with a delay pending, and
// counting against MaxAckPending, for the whole delay. With a window of one,
// the second message waits until the first comes back.
func TestNakWithDelayHoldsItsSlot(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartServer(t)
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := transport.Ensure(ctx, js, transport.DefaultName); err != nil {
		t.Fatal(err)
	}
	cons, err := transport.EnsureConsumer(ctx, js, transport.DefaultName, transport.ConsumerOptions{MaxAckPending: 1, MaxDeliver: 5, AckWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first", "second"} {
		if _, err := js.Publish(ctx, transport.Subject("ns", name), []byte(name)); err != nil {
			t.Fatal(err)
		}
	}
	const delay = time.Second
	batch, err := cons.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	for msg := range batch.Messages() {
		if err := msg.NakWithDelay(delay); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	batch, err = cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range batch.Messages() {
		waited := time.Since(start)
		if string(msg.Data()) != "first" || waited < delay*9/10 {
			t.Errorf("got %q after %v: the nak'ed message did not hold the only slot for its delay (%v)", msg.Data(), waited, delay)
		}
	}
}

// TestRetriesHoldNoSlot: events whose deliveries keep failing wait out
// their back-off as scheduled messages, so with a window of two, two of
// them failing do not keep a third event from being delivered at once.
func TestRetriesHoldNoSlot(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	sink := dispatch.SinkFunc(func(_ context.Context, e cloudevents.Event) cloudevents.Result {
		pod, err := podevent.Decode(e)
		if err != nil {
			return err
		}
		mu.Lock()
		calls[pod.Name]++
		mu.Unlock()
		if strings.HasPrefix(pod.Name, "down") {
			return cehttp.NewResult(http.StatusServiceUnavailable, "down")
		}
		return cehttp.NewResult(http.StatusOK, "ok")
	})
	e := startIn(t, testenv.Context(t), sink, dispatch.Options{
		Consumer:  transport.ConsumerOptions{MaxAckPending: 2, MaxDeliver: 2, AckWait: 5 * time.Second},
		BaseDelay: 1500 * time.Millisecond, MaxDelay: 1500 * time.Millisecond,
	})
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[name]
	}
	e.publish(t, pod("down-1", "1"))
	e.publish(t, pod("down-2", "1"))
	testenv.Eventually(t, 5*time.Second, "both failing events scheduled for a retry", func() bool {
		return testutil.ToFloat64(e.dm.Retries) == 2
	})
	start := time.Now()
	e.publish(t, pod("ok", "1"))
	testenv.Eventually(t, time.Second, "the third event delivered during the others' back-off", func() bool { return count("ok") == 1 })
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("the third event waited %v", waited)
	}
	if n := count("down-1") + count("down-2"); n != 2 {
		t.Errorf("the failing events were delivered %d times within their back-off, want 2", n)
	}
	// The back-off ends: each is delivered again, up to MaxDeliver.
	testenv.Eventually(t, 20*time.Second, "MaxDeliver attempts each", func() bool {
		return count("down-1") == 2 && count("down-2") == 2 && testutil.ToFloat64(e.dm.Exhausted) == 2 && e.stats() == 0
	})
}

// TestFinalFailureIsNotPublishedAgain: a pod state the function answers
// with a final 422 is terminated and recorded; publishing the same state
// again (the bridge's resync) sends nothing, and a new state of the pod is
// delivered.
func TestFinalFailureIsNotPublishedAgain(t *testing.T) {
	h := newHandler(map[string][]int{"hopeless": {422, 422, 422, 422}})
	e := start(t, dispatch.SinkFunc(h.Handle))
	e.publish(t, pod("hopeless", "1"))
	testenv.Eventually(t, 5*time.Second, "the final failure recorded", func() bool {
		return testutil.ToFloat64(e.dm.Final) == 1 && e.stats() == 0
	})
	kv, err := e.js.KeyValue(e.ctx, final.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if entry, err := kv.Get(e.ctx, "uid-hopeless/1"); err != nil || !strings.Contains(string(entry.Value()), "422") {
		t.Fatalf("final failure entry = %v, %v", entry, err)
	}
	// The publisher follows the bucket asynchronously: republish until it
	// skips (a republish before that is delivered and refused again).
	testenv.Eventually(t, 5*time.Second, "the publisher to skip the state", func() bool {
		e.publish(t, pod("hopeless", "1"))
		return testutil.ToFloat64(e.bm.FinalSkipped) >= 1
	})
	testenv.Eventually(t, 5*time.Second, "the stream to drain", func() bool { return e.stats() == 0 })
	before := h.deliveries("hopeless")
	for range 3 {
		e.publish(t, pod("hopeless", "1"))
	}
	if got := testutil.ToFloat64(e.bm.FinalSkipped); got < 4 {
		t.Errorf("final_skipped = %v, want at least 4", got)
	}
	e.publish(t, pod("hopeless", "2")) // the pod changed
	testenv.Eventually(t, 5*time.Second, "the new state delivered", func() bool { return h.deliveries("hopeless") == before+1 })
}
