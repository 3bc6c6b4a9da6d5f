// Package dispatch is the bridge's consumer side: a durable JetStream pull
// consumer, shared by every replica, that delivers each event to the
// function and acks only once the function has handled it.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// Options configure a Dispatcher.
type Options struct {
	// Stream is the JetStream stream name.
	Stream string
	// Consumer tunes the durable consumer.
	Consumer transport.ConsumerOptions
	// BaseDelay and MaxDelay bound the exponential nak delay (by delivery
	// count), and the wait before re-creating a lost consumer. Defaults 1s
	// and 1m.
	BaseDelay, MaxDelay time.Duration
	// Heartbeat is how often the server tells a waiting pull it is alive;
	// two missed ones mean the consumer is lost (default 5s).
	Heartbeat time.Duration
}

// Dispatcher delivers events from the stream to a Sink.
type Dispatcher struct {
	js      jetstream.JetStream
	sink    Sink
	m       *metrics.Dispatch
	o       Options
	running atomic.Bool
}

// New returns a dispatcher; Run starts it.
func New(js jetstream.JetStream, sink Sink, m *metrics.Dispatch, o Options) *Dispatcher {
	if o.Stream == "" {
		o.Stream = transport.DefaultName
	}
	if o.Consumer.MaxAckPending == 0 {
		o.Consumer = transport.DefaultConsumerOptions()
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = time.Second
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = time.Minute
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 5 * time.Second
	}
	return &Dispatcher{js: js, sink: sink, m: m, o: o}
}

// Running reports whether the consumer is consuming (readiness).
func (d *Dispatcher) Running() bool { return d.running.Load() }

// Waits before re-creating a lost consumer: short, because events wait
// meanwhile (a NATS outage ends with a reconnect, then at most this long).
const (
	restoreDelay    = 500 * time.Millisecond
	maxRestoreDelay = 4 * time.Second
)

// Run consumes until ctx is done, then waits for deliveries under way.
// When the durable consumer (or its stream) disappears — deleted by hand,
// NATS reinstalled without its volume — it is re-created, with a warning,
// and Running reports false until it is.
func (d *Dispatcher) Run(ctx context.Context) error {
	logger := logging.FromContext(ctx)
	// MaxAckPending already bounds deliveries across replicas; the
	// semaphore bounds this replica's goroutines to the same number.
	sem := make(chan struct{}, d.o.Consumer.MaxAckPending)
	var wg sync.WaitGroup
	defer wg.Wait()
	handler := func(msg jetstream.Msg) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d.handle(ctx, msg)
		})
	}
	for attempt := 0; ; attempt++ {
		lost, err := d.consume(ctx, handler)
		d.running.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			logger.Warnw("The durable consumer is unavailable; retrying", zap.String("consumer", transport.Durable), zap.Error(err))
		} else {
			d.m.ConsumerRestores.Inc()
			logger.Warnw("The durable consumer is gone; re-creating it", zap.String("consumer", transport.Durable), zap.Error(lost))
		}
		if err == nil {
			attempt = 0 // it consumed: the back-off starts over
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(min(restoreDelay<<min(attempt, 3), maxRestoreDelay)):
		}
	}
}

// consume ensures the stream and the consumer, then consumes until ctx is
// done or the consumer is lost (the error that said so).
func (d *Dispatcher) consume(ctx context.Context, handler jetstream.MessageHandler) (lost, err error) {
	logger := logging.FromContext(ctx)
	if _, err := transport.Ensure(ctx, d.js, d.o.Stream); err != nil {
		return nil, err
	}
	cons, err := transport.EnsureConsumer(ctx, d.js, d.o.Stream, d.o.Consumer)
	if err != nil {
		return nil, err
	}
	gone := make(chan error, 1)
	cc, err := cons.Consume(handler, jetstream.PullMaxMessages(d.o.Consumer.MaxAckPending),
		jetstream.PullHeartbeat(d.o.Heartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			switch {
			case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound),
				errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrNoHeartbeat):
				select {
				case gone <- err:
				default:
				}
			case !errors.Is(err, context.Canceled):
				logger.Debugw("Consumer", zap.Error(err))
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("consuming %s: %w", transport.Durable, err)
	}
	defer cc.Stop()
	d.running.Store(true)
	logger.Infow("Dispatching", zap.String("stream", d.o.Stream), zap.String("consumer", transport.Durable))
	select {
	case <-ctx.Done():
		return nil, nil
	case lost := <-gone:
		return lost, nil
	}
}

// handle delivers one message and settles it.
func (d *Dispatcher) handle(ctx context.Context, msg jetstream.Msg) {
	d.m.InFlight.Inc()
	defer d.m.InFlight.Dec()
	log := logging.FromContext(ctx).Desugar().With(zap.String("subject", msg.Subject()))
	delivered := uint64(1)
	if meta, err := msg.Metadata(); err == nil {
		delivered = meta.NumDelivered
	}
	if delivered > 1 {
		d.m.Redeliveries.Inc()
	}

	e, err := transport.ReadEvent(ctx, &nats.Msg{Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data()})
	if err == nil {
		_, err = podevent.Decode(*e)
	}
	if err != nil {
		d.m.Poison.WithLabelValues("decode").Inc()
		log.Error("Terminating undecodable message", zap.Error(err))
		d.settle(log, msg, Term, err.Error(), delivered)
		return
	}
	log = log.With(zap.String("id", e.ID()))

	start := time.Now()
	stop := keepInProgress(msg, d.o.Consumer.AckWait/3)
	res := d.sink.Send(ctx, *e)
	stop()
	d.m.Duration.Observe(time.Since(start).Seconds())
	action, class := Classify(res)
	d.m.Delivered.WithLabelValues(class).Inc()
	switch action {
	case Term:
		d.m.Poison.WithLabelValues("rejected").Inc()
		log.Error("Sink rejected event; terminating it", zap.Stringer("result", resultString{res}))
	case Nak:
		if ctx.Err() != nil {
			// Shutting down: the sink call was cut short, not failed. Let
			// another replica (or this one, restarted) have it at once.
			_ = msg.Nak()
			return
		}
		if d.o.Consumer.MaxDeliver > 0 && delivered >= uint64(d.o.Consumer.MaxDeliver) {
			d.m.Exhausted.Inc()
			log.Error("Giving up on event after its last delivery; the resync republishes it if still needed",
				zap.Uint64("deliveries", delivered), zap.Stringer("result", resultString{res}))
			action = Term
		} else {
			log.Info("Delivery failed; retrying", zap.Uint64("deliveries", delivered), zap.Stringer("result", resultString{res}))
		}
	}
	d.settle(log, msg, action, fmt.Sprint(res), delivered)
}

func (d *Dispatcher) settle(log *zap.Logger, msg jetstream.Msg, a Action, reason string, delivered uint64) {
	var err error
	switch a {
	case Ack:
		err = msg.Ack()
	case Nak:
		err = msg.NakWithDelay(d.delay(delivered))
	case Term:
		err = msg.TermWithReason(reason)
	}
	if err != nil {
		// The server redelivers after AckWait; nothing is lost.
		log.Warn("Settling message", zap.Stringer("action", a), zap.Error(err))
	}
}

// keepInProgress tells JetStream, every period until stop is called, that
// msg is still being worked on. A delivery slower than AckWait (an exec
// waiting on a busy API server) would otherwise be redelivered to another
// worker while still in flight, and the proxy quit twice.
func keepInProgress(msg jetstream.Msg, period time.Duration) (stop func()) {
	if period <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress() // a lost one only risks the redelivery it prevents
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// delay is BaseDelay doubled per previous delivery, capped at MaxDelay.
func (d *Dispatcher) delay(delivered uint64) time.Duration {
	delay := d.o.BaseDelay
	for i := uint64(1); i < delivered && delay < d.o.MaxDelay; i++ {
		delay *= 2
	}
	return min(delay, d.o.MaxDelay)
}

type resultString struct{ res error }

func (r resultString) String() string {
	if r.res == nil {
		return "<nil>"
	}
	return r.res.Error()
}
