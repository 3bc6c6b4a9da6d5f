package dispatch

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/istio-aux/istio-aux/bridge/final"
	"github.com/istio-aux/istio-aux/bridge/transport"
)

// Headers the dispatcher adds to a retry. A retry is a new message, so
// JetStream's delivery count and Nats-Msg-Id start over: these carry the
// attempt and the pod state's dedup id across.
const (
	HeaderAttempt = "Istio-Aux-Attempt"
	HeaderDedupID = "Istio-Aux-Dedup-Id"
)

// publishTimeout bounds the publish of a retry or a final failure.
const publishTimeout = 5 * time.Second

// attemptOf is the delivery attempt msg is: the attempt its retry header
// carries (1 for a first delivery), plus JetStream's redeliveries of this
// very message (a dispatcher that died holding it).
func attemptOf(msg jetstream.Msg) int {
	attempt := 1
	if n, err := strconv.Atoi(msg.Headers().Get(HeaderAttempt)); err == nil && n > 1 {
		attempt = n
	}
	if meta, err := msg.Metadata(); err == nil && meta.NumDelivered > 1 {
		attempt += int(meta.NumDelivered) - 1
	}
	return attempt
}

// dedupIDOf is the dedup id of the pod state msg carries (slim.DedupID),
// or "" for a message published without one.
func dedupIDOf(msg jetstream.Msg) string {
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		return id
	}
	return msg.Headers().Get(HeaderDedupID)
}

// retry settles msg by scheduling a copy of it to come back to its subject
// after the back-off, then acking it. A nak with a delay would keep the
// message pending for the whole back-off (nats-server counts it against
// MaxAckPending until it is redelivered: TestNakWithDelayHoldsItsSlot), so
// events that keep failing would fill the window everyone shares; a
// scheduled message waits in the stream and holds nothing. If the schedule
// cannot be published, msg is nak'ed with the delay instead: nothing is lost.
func (d *Dispatcher) retry(ctx context.Context, log *zap.Logger, msg jetstream.Msg, attempt int) {
	delay := d.delay(attempt)
	r, ok := retryMsg(msg, attempt, time.Now().Add(delay))
	if ok {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		_, err := d.js.PublishMsg(pctx, r)
		cancel()
		if err == nil {
			d.m.Retries.Inc()
			d.settle(log, msg, Ack, "")
			return
		}
		log.Warn("Scheduling the retry failed; holding the event instead", zap.Error(err))
	}
	if err := msg.NakWithDelay(delay); err != nil {
		log.Warn("Settling message", zap.Stringer("action", Nak), zap.Error(err))
	}
}

// retryMsg is the scheduled copy of msg for attempt+1, due at due.
func retryMsg(msg jetstream.Msg, attempt int, due time.Time) (*nats.Msg, bool) {
	ns, name, ok := transport.ParseSubject(msg.Subject())
	if !ok {
		return nil, false
	}
	meta, err := msg.Metadata()
	if err != nil {
		return nil, false
	}
	r := nats.NewMsg(transport.RetrySubject(ns, name))
	for k, vs := range msg.Headers() {
		// JetStream's own headers (the dedup id, a previous schedule's)
		// belong to the message being settled.
		if !strings.HasPrefix(k, "Nats-") && len(vs) > 0 {
			r.Header[k] = vs
		}
	}
	r.Header.Set(HeaderAttempt, strconv.Itoa(attempt+1))
	if id := dedupIDOf(msg); id != "" {
		r.Header.Set(HeaderDedupID, id)
	}
	r.Header.Set(jetstream.ScheduleHeader, "@at "+due.UTC().Format(time.RFC3339Nano))
	r.Header.Set(jetstream.ScheduleTargetHeader, msg.Subject())
	// A dispatcher that dies after this publish and before its ack gets
	// the message again: the same stream sequence makes the same retry.
	r.Header.Set(jetstream.MsgIDHeader, "retry/"+strconv.FormatUint(meta.Sequence.Stream, 10))
	r.Data = msg.Data()
	return r, true
}

// remember records msg's pod state as a final failure (final.Bucket), so
// that the bridge does not publish it again while it is unchanged.
func (d *Dispatcher) remember(ctx context.Context, log *zap.Logger, msg jetstream.Msg, res error) {
	finals := d.finals.Load()
	if finals == nil {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	recorded, err := final.Record(pctx, *finals, dedupIDOf(msg), resultString{res}.String())
	if err != nil {
		// The resync will deliver it again, and it will fail again: a
		// wasted delivery, nothing worse.
		log.Warn("Recording a final failure", zap.Error(err))
		return
	}
	if recorded {
		d.m.Final.Inc()
	}
}
