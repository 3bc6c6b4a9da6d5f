// Package transport is the bridge's NATS transport: istio-aux's JetStream
// layout (the stream the bridge publishes to and the durable consumer the
// dispatchers share), CloudEvents on NATS messages, and the embedded
// nats-server used when no NATS_URL is given.
package transport

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults for names and windows.
const (
	// DefaultName is the stream name (NATS_STREAM).
	DefaultName = "ISTIO_AUX"
	// SubjectPrefix is followed by the pod's namespace and name.
	SubjectPrefix = "istio-aux.pods."
	// RetryPrefix is where a delivery to retry later waits, also followed
	// by the pod's namespace and name: a message scheduled (nats-server ≥
	// 2.12) to move back to the pod's subject when its back-off ends, so
	// that waiting holds nothing the dispatchers share.
	RetryPrefix = "istio-aux.retry."
	// Durable is the consumer every dispatcher replica shares.
	Durable = "istio-aux-dispatch"

	// DuplicateWindow is how long JetStream remembers Nats-Msg-Ids. It must
	// be shorter than the bridge's resync period (5m by default): within
	// the window, republishing a state (a bridge restart, a retried ack) is
	// absorbed; a resync after the window re-delivers pods that still decide
	// Quit, which is how a quit lost downstream (function down, exec failed
	// after all retries) is tried again.
	DuplicateWindow = 2 * time.Minute
	// MaxAge drops events nobody consumed in a day: by then the live pod,
	// not the event, is the truth and the resync republishes what matters.
	MaxAge = 24 * time.Hour
	// MaxMsgSize bounds one event. An event carries what the decision
	// reads of its pod (decision.Inputs: one restart rule of one exit code
	// per terminated app), about 90 KiB for the widest pod the function's
	// decoder takes, however long its rules; a wider pod travels as its
	// name only (TestNoValidPodExceedsTheStream).
	MaxMsgSize = 256 << 10
	// MaxBytes bounds the whole stream on disk. With one event kept per pod
	// (MaxMsgsPerSubject), it holds the undelivered events of hundreds of
	// thousands of pods; past it the oldest go first, and the resync
	// republishes any pod that still needs its quit.
	MaxBytes = 512 << 20
)

// Subject is where events about one pod go: one subject per pod, so that
// the stream keeps at most one event per pod (the newest; the function
// reads the live pod anyway) and a flood of updates cannot grow it.
func Subject(namespace, name string) string { return SubjectPrefix + namespace + "." + name }

// RetrySubject is where a retry of the pod's event waits.
func RetrySubject(namespace, name string) string { return RetryPrefix + namespace + "." + name }

// ParseSubject is the pod a subject of Subject names. A namespace is a DNS
// label (no dots); a pod name may hold dots, so it is the rest.
func ParseSubject(subject string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix)
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ".")
	if !ok || namespace == "" || name == "" {
		return "", "", false
	}
	return namespace, name, true
}

// StreamConfig is the stream: WorkQueue retention, so an event acked by a
// dispatcher is gone and the store holds only undelivered work; replicas
// copies of it (Replicas).
func StreamConfig(name string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Replicas:    replicas,
		Name:        name,
		Description: "istio-aux pod events (CloudEvents, binary mode)",
		Subjects:    []string{SubjectPrefix + ">", RetryPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      MaxAge,
		Duplicates:  DuplicateWindow,
		Discard:     jetstream.DiscardOld,
		// One event per pod: a newer state replaces one not yet delivered.
		MaxMsgsPerSubject: 1,
		MaxMsgSize:        MaxMsgSize,
		MaxBytes:          MaxBytes,
		// Retries wait as scheduled messages (RetryPrefix), not as naks
		// that would hold a MaxAckPending slot for their whole back-off.
		AllowMsgSchedules: true,
	}
}

// Replicas is how many copies of the stream, its consumer and the bucket
// of final failures istio-aux keeps on the servers js is connected to:
// three on a cluster (config/nats: any one server may go), one on a
// server alone (config/nats-single, the all-in-one's embedded server). An
// existing stream of one copy is scaled up when its server joins a
// cluster.
func Replicas(js jetstream.JetStream) int {
	if js.Conn().ConnectedClusterName() != "" {
		return 3
	}
	return 1
}

// Ensure creates or updates the stream; safe to call from every replica at
// every start.
func Ensure(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	s, err := js.CreateOrUpdateStream(ctx, StreamConfig(name, Replicas(js)))
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", name, err)
	}
	if !s.CachedInfo().Config.AllowMsgSchedules {
		// A server before 2.12 drops the setting it does not know; retries
		// would then wait on their subject for ever.
		return nil, fmt.Errorf("stream %s: the NATS server does not schedule messages (istio-aux needs nats-server 2.12 or later)", name)
	}
	return s, nil
}

// ConsumerOptions tune the durable consumer.
type ConsumerOptions struct {
	// MaxAckPending bounds the events the dispatchers hold at once, across
	// replicas: waiting for a worker or in delivery. It is a window, larger
	// than any replica's workers, so a dispatcher sees past a namespace's
	// backlog to the events of others (dispatch.Options.PerNamespace); the
	// workers, not the window, bound what the function sees.
	MaxAckPending int
	// MaxDeliver bounds attempts per event.
	MaxDeliver int
	// AckWait is how long JetStream waits for a word from the dispatcher
	// holding a delivery before it redelivers. A live dispatcher reports
	// progress every AckWait/3, so AckWait is only how long the events a
	// dead (SIGKILLed) dispatcher held stay stuck; while they are, they
	// count against MaxAckPending, so a dispatcher killed with a full
	// window stalls every delivery for AckWait.
	AckWait time.Duration
}

// DefaultConsumerOptions are the production values.
func DefaultConsumerOptions() ConsumerOptions {
	// AckWait was 30 s: the chaos suite (seed 753350208) caught a
	// dispatcher SIGKILLed 2 s after a NATS outage with 64 events held,
	// and nothing was delivered for 30 s; median app end → quit 23 s.
	// MaxAckPending was 64, the workers' number: a namespace with 64
	// events ahead of everyone else's held the whole window.
	return ConsumerOptions{MaxAckPending: 1024, MaxDeliver: 10, AckWait: 10 * time.Second}
}

// ConsumerConfig is the shared durable pull consumer.
//
// It deliberately has no BackOff: measured with nats-server v2.15.2, a
// consumer BackOff also governs when a message nak'ed with a delay comes
// back (a 10ms NakWithDelay waited for the next BackOff/AckWait tick,
// seconds), so the dispatcher's own exponential NakWithDelay would be
// overridden. AckWait alone covers a dispatcher that died mid-delivery.
func ConsumerConfig(o ConsumerOptions) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       Durable,
		Description:   "istio-aux dispatch to the proxy-quit function",
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: SubjectPrefix + ">",
		MaxAckPending: o.MaxAckPending,
		MaxDeliver:    o.MaxDeliver,
		AckWait:       o.AckWait,
	}
}

// EnsureConsumer creates or updates the durable consumer on the stream.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, streamName string, o ConsumerOptions) (jetstream.Consumer, error) {
	c, err := js.CreateOrUpdateConsumer(ctx, streamName, ConsumerConfig(o))
	if err != nil {
		return nil, fmt.Errorf("creating consumer %s on %s: %w", Durable, streamName, err)
	}
	return c, nil
}
