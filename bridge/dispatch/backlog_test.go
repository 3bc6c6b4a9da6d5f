package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/bridge/transport"
)

// TestBacklogCountsEventsNotYetSettled: istio_aux_dispatch_backlog counts
// the events the dispatchers hold and those still waiting in the stream
// beyond the window (which no replica's own gauges see), and falls to zero
// once they are delivered.
func TestBacklogCountsEventsNotYetSettled(t *testing.T) {
	release := make(chan struct{})
	sink := dispatch.SinkFunc(func(ctx context.Context, _ cloudevents.Event) cloudevents.Result {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	e := startIn(t, testenv.Context(t), sink, dispatch.Options{
		Consumer:      transport.ConsumerOptions{MaxAckPending: 2, MaxDeliver: 5, AckWait: 5 * time.Second},
		BacklogPeriod: 20 * time.Millisecond,
	})
	for i := range 5 {
		e.publish(t, pod(fmt.Sprintf("p%d", i), "1"))
	}
	testenv.Eventually(t, 5*time.Second, "a backlog of 5 with 2 in delivery", func() bool {
		return testutil.ToFloat64(e.dm.Backlog) == 5 && testutil.ToFloat64(e.dm.InFlight) == 2
	})
	close(release)
	testenv.Eventually(t, 5*time.Second, "the backlog to drain", func() bool {
		return testutil.ToFloat64(e.dm.Backlog) == 0 && e.stats() == 0
	})
}
