// Package dispatch is the bridge's consumer side: a durable JetStream pull
// consumer, shared by every replica, that delivers each event to the
// function and acks only once the function has handled it.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/final"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/transport"
)

// Options configure a Dispatcher.
type Options struct {
	// Stream is the JetStream stream name.
	Stream string
	// Consumer tunes the durable consumer; its MaxAckPending is the window
	// of events the dispatchers hold, waiting or in delivery.
	Consumer transport.ConsumerOptions
	// Workers bounds this replica's deliveries under way (default 64): the
	// concurrency the function sees from it.
	Workers int
	// PerNamespace bounds one namespace's deliveries under way while
	// another namespace has events waiting (default a quarter of Workers):
	// its share. Alone, a namespace borrows the idle workers but the last
	// PerNamespace, which stay free for the other namespaces whatever it
	// has waiting (fair.go).
	PerNamespace int
	// BaseDelay and MaxDelay bound the exponential back-off of a retry (by
	// attempt), and the wait before re-creating a lost consumer. Defaults
	// 1s and 1m.
	BaseDelay, MaxDelay time.Duration
	// Heartbeat is how often the server tells a waiting pull it is alive;
	// two missed ones mean the consumer is lost (default 5s).
	Heartbeat time.Duration
	// Drain is how long deliveries under way may go on once Run's context
	// is done (default 20s, inside a pod's default 30 s of grace). A quit
	// cut short could have reached the proxy with nobody left to record
	// it; one that outlasts Drain is cut, and handed back to JetStream.
	Drain time.Duration
	// BacklogPeriod is how often the durable consumer's backlog is read
	// for istio_aux_dispatch_backlog (default 15s: twice per typical
	// scrape, one small JetStream request per replica each time).
	BacklogPeriod time.Duration
}

// Dispatcher delivers events from the stream to a Sink.
type Dispatcher struct {
	js      jetstream.JetStream
	sink    Sink
	m       *metrics.Dispatch
	o       Options
	running atomic.Bool
	finals  atomic.Pointer[jetstream.KeyValue]
}

// New returns a dispatcher; Run starts it.
func New(js jetstream.JetStream, sink Sink, m *metrics.Dispatch, o Options) *Dispatcher {
	if o.Stream == "" {
		o.Stream = transport.DefaultName
	}
	if o.Consumer.MaxAckPending == 0 {
		o.Consumer = transport.DefaultConsumerOptions()
	}
	if o.Workers <= 0 {
		o.Workers = 64
	}
	if o.PerNamespace <= 0 {
		o.PerNamespace = max(o.Workers/4, 1)
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
	if o.Drain <= 0 {
		o.Drain = 20 * time.Second
	}
	if o.BacklogPeriod <= 0 {
		o.BacklogPeriod = 15 * time.Second
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

// Run consumes until ctx is done, then waits for deliveries under way (up
// to Options.Drain) and hands the events still waiting back to JetStream. Consumed events wait in
// a queue per namespace (queue) for one of the Workers. When the durable
// consumer (or its stream) disappears — deleted by hand, NATS reinstalled
// without its volume — it is re-created, with a warning, and Running
// reports false until it is.
func (d *Dispatcher) Run(ctx context.Context) error {
	logger := logging.FromContext(ctx)
	q := newQueue(d.o.PerNamespace, d.o.Workers)
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		// Let another replica (or this one, restarted) have them at once.
		for _, msg := range q.drain() {
			_ = msg.Nak()
		}
		d.m.Waiting.Set(0)
	}()
	// The keep-alive outlives ctx until the deliveries under way have
	// drained: one redelivered meanwhile would be quit twice.
	kctx, drained := context.WithCancel(context.WithoutCancel(ctx))
	wg.Go(func() { d.keepAlive(kctx, q) })
	wg.Go(func() { defer drained(); d.work(ctx, q) })
	handler := func(msg jetstream.Msg) {
		ns, _, _ := transport.ParseSubject(msg.Subject())
		q.push(msg, ns)
		waiting, _ := q.sizes()
		d.m.Waiting.Set(float64(waiting))
	}
	restore := restoreBackoff()
	for {
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
			restore = restoreBackoff() // it consumed: the back-off starts over
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(restore.Step()):
		}
	}
}

// restoreBackoff spaces out the attempts to consume again: restoreDelay,
// doubled each time up to maxRestoreDelay.
func restoreBackoff() wait.Backoff {
	return wait.Backoff{Duration: restoreDelay, Factor: 2, Cap: maxRestoreDelay, Steps: math.MaxInt32}
}

// work hands the queue's messages to at most Workers deliveries at once,
// taking the next one only when a worker is free, so that the namespace
// whose turn it is then gets it.
func (d *Dispatcher) work(ctx context.Context, q *queue) {
	sem := make(chan struct{}, d.o.Workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		it, ok := q.next(ctx)
		if !ok {
			return
		}
		waiting, _ := q.sizes()
		d.m.Waiting.Set(float64(waiting))
		wg.Go(func() {
			defer func() { q.done(it); <-sem }()
			dctx, cancel := draining(ctx, d.o.Drain)
			defer cancel()
			d.handle(dctx, it.msg)
		})
	}
}

// draining is a context for one delivery: it carries ctx's values, and is
// cancelled grace after ctx is done rather than with it, so a delivery under
// way when the replica is told to stop can finish (the exec, its Event, the
// ack) instead of being cut between the quit and its record.
func draining(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(grace, cancel)
		context.AfterFunc(dctx, func() { t.Stop() })
	})
	return dctx, func() { stop(); cancel() }
}

// keepAlive tells JetStream, every AckWait/3, that every message held here
// is still being worked on: one waiting for a worker, or one in a delivery
// slower than AckWait (an exec waiting on a busy API server), would
// otherwise be redelivered to another replica while still held, and the
// proxy quit twice.
func (d *Dispatcher) keepAlive(ctx context.Context, q *queue) {
	period := d.o.Consumer.AckWait / 3
	if period <= 0 {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A lost one only risks the redelivery it prevents.
			q.each(func(msg jetstream.Msg) { _ = msg.InProgress() })
		}
	}
}

// consume ensures the stream, the consumer and the bucket of final
// failures, then consumes until ctx is done or the consumer is lost (the
// error that said so).
func (d *Dispatcher) consume(ctx context.Context, handler jetstream.MessageHandler) (lost, err error) {
	logger := logging.FromContext(ctx)
	if _, err := transport.Ensure(ctx, d.js, d.o.Stream); err != nil {
		return nil, err
	}
	finals, err := final.Ensure(ctx, d.js, transport.Replicas(d.js))
	if err != nil {
		return nil, err
	}
	d.finals.Store(&finals)
	cons, err := transport.EnsureConsumer(ctx, d.js, d.o.Stream, d.o.Consumer)
	if err != nil {
		return nil, err
	}
	gone := make(chan error, 1)
	// The handler only queues, so the client keeps pulling up to the
	// window; the server's MaxAckPending bounds what all replicas hold.
	cc, err := cons.Consume(handler, jetstream.PullMaxMessages(min(d.o.Consumer.MaxAckPending, maxPull)),
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
	defer d.watchBacklog(ctx, cons)()
	d.running.Store(true)
	logger.Infow("Dispatching", zap.String("stream", d.o.Stream), zap.String("consumer", transport.Durable))
	select {
	case <-ctx.Done():
		return nil, nil
	case lost := <-gone:
		return lost, nil
	}
}

// maxPull bounds one pull request's batch.
const maxPull = 256

// handle delivers one message and settles it: ack a 2xx; remember and
// terminate a final answer (Final); schedule a retry of anything else, up to
// MaxDeliver attempts.
func (d *Dispatcher) handle(ctx context.Context, msg jetstream.Msg) {
	d.m.InFlight.Inc()
	defer d.m.InFlight.Dec()
	log := logging.FromContext(ctx).Desugar().With(zap.String("subject", msg.Subject()))
	attempt := attemptOf(msg)
	if attempt > 1 {
		d.m.Redeliveries.Inc()
	}

	e, err := transport.ReadEvent(ctx, &nats.Msg{Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data()})
	if err != nil {
		d.m.Poison.WithLabelValues("decode").Inc()
		log.Error("Terminating undecodable message", zap.Error(err))
		d.settle(log, msg, Term, err.Error())
		return
	}
	log = log.With(zap.String("id", e.ID()))

	start := time.Now()
	res := d.sink.Send(ctx, *e)
	d.m.Duration.Observe(time.Since(start).Seconds())
	action, class := Classify(res)
	d.m.Delivered.WithLabelValues(class).Inc()
	switch action {
	case Term:
		d.m.Poison.WithLabelValues("rejected").Inc()
		log.Warn("The sink refused the event for good; terminating it", zap.Stringer("result", resultString{res}))
		d.remember(ctx, log, msg, res)
	case Nak:
		if ctx.Err() != nil {
			// Shutting down: the sink call was cut short, not failed. Let
			// another replica (or this one, restarted) have it at once.
			_ = msg.Nak()
			return
		}
		if d.o.Consumer.MaxDeliver > 0 && attempt >= d.o.Consumer.MaxDeliver {
			d.m.Exhausted.Inc()
			log.Error("Giving up on event after its last delivery; the resync republishes it if still needed",
				zap.Int("deliveries", attempt), zap.Stringer("result", resultString{res}))
			action = Term
			break
		}
		log.Info("Delivery failed; retrying", zap.Int("deliveries", attempt), zap.Stringer("result", resultString{res}))
		d.retry(ctx, log, msg, attempt)
		return
	}
	d.settle(log, msg, action, fmt.Sprint(res))
}

func (d *Dispatcher) settle(log *zap.Logger, msg jetstream.Msg, a Action, reason string) {
	var err error
	switch a {
	case Ack:
		err = msg.Ack()
	case Nak:
		err = msg.Nak()
	case Term:
		err = msg.TermWithReason(reason)
	}
	if err != nil {
		// The server redelivers after AckWait; nothing is lost.
		log.Warn("Settling message", zap.Stringer("action", a), zap.Error(err))
	}
}

// delay is BaseDelay doubled per previous attempt, capped at MaxDelay: the
// attempt-th step of the back-off, computed from the delivery count the
// message carries (a retry may be delivered to any dispatcher).
func (d *Dispatcher) delay(attempt int) time.Duration {
	b := wait.Backoff{Duration: d.o.BaseDelay, Factor: 2, Cap: d.o.MaxDelay, Steps: math.MaxInt32}
	delay := b.Step()
	for i := 1; i < attempt && delay < d.o.MaxDelay; i++ {
		delay = b.Step()
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
