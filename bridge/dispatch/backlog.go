package dispatch

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/transport"
)

// consumerInfo is what the backlog needs of a jetstream.Consumer.
type consumerInfo interface {
	Info(ctx context.Context) (*jetstream.ConsumerInfo, error)
}

// watchBacklog reads the consumer's backlog now and every BacklogPeriod
// until the returned stop is called (when consuming ends), which waits for
// it to return.
//
// The backlog is a count, not the age of the oldest event, on purpose: the
// bridge republishes every pod still deciding Quit at each resync (5m), and
// past the dedup window the new message replaces the waiting one (one per
// subject), which JetStream settles like an ack. The oldest message's
// stream time, and the consumer's ack floor, so start over every resync
// whatever the wait; the count does not. The alert that an event waits
// (config/monitoring) compares it with the rate of deliveries.
func (d *Dispatcher) watchBacklog(ctx context.Context, c consumerInfo) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d.o.BacklogPeriod)
		defer t.Stop()
		for {
			d.readBacklog(ctx, c)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// readBacklog sets the backlog gauge from the consumer's info. When the
// consumer cannot be read, the last value stands: the events it counted
// still wait, and a gauge dropped to zero would hide them.
func (d *Dispatcher) readBacklog(ctx context.Context, c consumerInfo) {
	ictx, cancel := context.WithTimeout(ctx, d.o.BacklogPeriod)
	defer cancel()
	info, err := c.Info(ictx)
	if err != nil {
		if ctx.Err() == nil { // not shutting down
			logging.FromContext(ctx).Debugw("Reading the consumer's backlog", zap.String("consumer", transport.Durable), zap.Error(err))
		}
		return
	}
	d.m.Backlog.Set(float64(info.NumPending) + float64(info.NumAckPending))
}
