// Package publish sends pod events to JetStream asynchronously, with a bound
// on unacknowledged publishes, and reports every ack (or its failure) back to
// the caller so nothing is ever dropped silently.
package publish

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/final"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// ErrNotConnected is returned while the NATS connection is down: the caller
// keeps the work and retries with back-off instead of filling the client's
// reconnect buffer with messages whose acks are lost anyway.
var ErrNotConnected = errors.New("not connected to NATS")

// Publisher publishes events. Run must be running for acks to be checked.
type Publisher struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	m       *metrics.Bridge
	stream  string
	pending chan pending
	// restore re-creates the stream when it has gone, at most once at a time.
	restore singleflight.Group
	// finals are the pod states not to publish again (final.Bucket).
	finals *final.Mirror
}

type pending struct {
	future jetstream.PubAckFuture
	event  *event.Event
	done   func(error)
}

// New returns a publisher to stream over js (see NewJetStream for the
// options it expects). maxPending bounds publishes awaiting their ack.
func New(nc *nats.Conn, js jetstream.JetStream, m *metrics.Bridge, stream string, maxPending int) *Publisher {
	return &Publisher{nc: nc, js: js, m: m, stream: stream, pending: make(chan pending, maxPending), finals: final.NewMirror()}
}

// NewJetStream is the JetStream context the publisher needs: at most
// maxPending unacknowledged async publishes (PublishMsgAsync then stalls,
// which is the back-pressure), and acks that time out instead of hanging.
func NewJetStream(nc *nats.Conn, maxPending int) (jetstream.JetStream, error) {
	return jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncTimeout(ackTimeout))
}

// Publish sends e to istio-aux.pods.<namespace>.<name> with Nats-Msg-Id =
// dedupID (the event id when empty).
// An error means nothing was sent and done will not be called; otherwise
// done is called exactly once, when Run has seen the ack: with nil when
// JetStream stored the event (or already had it), with an error otherwise.
// A pod state whose quit failed for good (final.Bucket) is not
// sent: done(nil) is called before Publish returns.
func (p *Publisher) Publish(ctx context.Context, e *event.Event, dedupID string, done func(error)) error {
	if dedupID == "" {
		dedupID = e.ID()
	}
	if p.finals.Has(dedupID) {
		p.m.FinalSkipped.Inc()
		done(nil)
		return nil
	}
	if !p.nc.IsConnected() {
		p.m.PublishErrors.WithLabelValues("publish").Inc()
		return ErrNotConnected
	}
	ns, name := extension(e, podevent.ExtNamespace), extension(e, podevent.ExtName)
	if ns == "" || name == "" {
		p.m.PublishErrors.WithLabelValues("encode").Inc()
		return fmt.Errorf("event %s has no namespace or name extension", e.ID())
	}
	// Sized for every header the event and JetStream write (eleven), so
	// the map is allocated once rather than grown while it is filled.
	msg := &nats.Msg{Subject: transport.Subject(ns, name), Header: make(nats.Header, 12)}
	if err := transport.WriteEvent(ctx, e, msg); err != nil {
		p.m.PublishErrors.WithLabelValues("encode").Inc()
		return err
	}
	f, err := p.js.PublishMsgAsync(msg, jetstream.WithMsgID(dedupID), jetstream.WithStallWait(stallWait))
	if err != nil {
		p.m.PublishErrors.WithLabelValues("publish").Inc()
		return fmt.Errorf("publishing %s: %w", e.ID(), err)
	}
	p.m.InFlight.Inc()
	select {
	case p.pending <- pending{future: f, event: e, done: done}:
		return nil
	case <-ctx.Done():
		// Sent but its ack will not be checked: report it as failed so the
		// caller keeps the work (a republish is deduplicated).
		p.m.InFlight.Dec()
		done(ctx.Err())
		return nil
	}
}

// extension is a string extension of e, or "". e.Extensions() would copy
// the event's whole extension map for every lookup.
func extension(e *event.Event, name string) string {
	if e.Context == nil {
		return ""
	}
	v, _ := e.Context.GetExtension(name)
	s, _ := v.(string)
	return s
}

// Run checks every ack, and follows the final failures, until ctx is done.
func (p *Publisher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { p.finals.Follow(ctx, p.js, transport.Replicas(p.js)) })
	for {
		select {
		case <-ctx.Done():
			return nil
		case pf := <-p.pending:
			p.settle(ctx, pf)
		}
	}
}

func (p *Publisher) settle(ctx context.Context, pf pending) {
	defer p.m.InFlight.Dec()
	select {
	case ack := <-pf.future.Ok():
		if ack.Duplicate {
			p.m.Deduplicated.Inc()
			pf.done(nil)
			return
		}
		p.m.Published.Inc()
		pf.done(nil)
	case err := <-pf.future.Err():
		p.m.PublishErrors.WithLabelValues("ack").Inc()
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			// Nothing stores the subject: the stream was deleted (NATS
			// reinstalled without its volume, or by hand). The caller's
			// retry will find it again.
			go p.restoreStream(ctx)
		}
		pf.done(fmt.Errorf("ack for %s: %w", pf.event.ID(), err))
	case <-ctx.Done():
		pf.done(ctx.Err())
	}
}

// restoreStream re-creates the stream, once for all the publishes that
// found it missing at the same time.
func (p *Publisher) restoreStream(ctx context.Context) {
	_, _, _ = p.restore.Do(p.stream, func() (any, error) {
		logger := logging.FromContext(ctx)
		logger.Warnw("The JetStream stream is gone; re-creating it", zap.String("stream", p.stream))
		if _, err := transport.Ensure(ctx, p.js, p.stream); err != nil {
			logger.Warnw("Re-creating the stream failed; the next publish tries again", zap.Error(err))
			return nil, err
		}
		p.m.StreamRestores.Inc()
		return nil, nil
	})
}
