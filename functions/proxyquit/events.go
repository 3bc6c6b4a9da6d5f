package proxyquit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// eventLog writes the function's Kubernetes Events. A ProxyQuit Event is
// the quit's only record, so it does not go through client-go's
// broadcaster (tools/record), whose ways lost it:
//   - it writes after the request that quit has answered, and that 2xx
//     acked the message: the record then lives only in the process. Under
//     Knative the function's container gets SIGTERM only once queue-proxy
//     has drained (its preStop), near the end of a grace period equal to
//     the revision's timeout; what is left unwritten then is lost;
//   - it writes one Event at a time: an Event whose write failed holds
//     every later one behind it for a random 0–10 s, then 10 s a try;
//   - it never retries an error the API server answers with a status (a
//     500 "etcdserver: request timed out", a 503, a 504), and tells klog
//     only;
//   - its Shutdown drops what is queued and the retries under way.
//
// Here the Events of a quit are written while its request waits
// (EventAndWait): each on its own, tried again with a short back-off
// until written, refused for good, or its deadline; the request answers
// (and the dispatcher acks) once that is settled. A quit's ProxyQuit
// Event is written before its exec, and deleted (DeleteAndWait) if the
// exec did not quit the proxy (Function.quit). Every Event that ends
// unwritten is handed to lost, once (a metric and an error log with the
// pod's name). The other Events (record.EventRecorder's methods: the
// settings follower's) are written the same way in the background;
// flush waits for them and for the writes under way.
type eventLog struct {
	sink   eventSink
	scheme *runtime.Scheme
	now    func() time.Time
	// lost is told of every Event that ends unwritten, once, with the
	// cause (unwritten*) and the last error.
	lost func(e *corev1.Event, cause string, err error)
	// background bounds each Event written in the background.
	background time.Duration

	// ctx ends the background writes (flush).
	ctx  context.Context
	stop context.CancelFunc

	mu      sync.Mutex
	pending map[*corev1.Event]struct{} // writes under way, settled by their writer or by flush
}

// eventSink creates and deletes Events; its errors are the API server's.
type eventSink interface {
	CreateEvent(ctx context.Context, e *corev1.Event) error
	DeleteEvent(ctx context.Context, namespace, name string) error
}

// apiEventSink creates and deletes Events through a core/v1 REST client.
type apiEventSink struct{ rest rest.Interface }

func (s apiEventSink) CreateEvent(ctx context.Context, e *corev1.Event) error {
	return s.rest.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(ctx).Error()
}

func (s apiEventSink) DeleteEvent(ctx context.Context, namespace, name string) error {
	return s.rest.Delete().Namespace(namespace).Resource("events").Name(name).Do(ctx).Error()
}

// Causes of an Event left unwritten: the cause label of
// istio_aux_proxyquit_events_unwritten_total.
const (
	unwrittenTimeout  = "timeout"  // not written by its deadline: the API server slow or failing all along
	unwrittenRejected = "rejected" // refused for good (RBAC, a namespace being deleted, an invalid Event)
	unwrittenShutdown = "shutdown" // the process stopped before its write ended
	// A ProxyQuit Event written ahead of its quit (Function.quit), whose
	// quit then failed, that could not be deleted (refused for good, or
	// not by its deadline): it stays on the pod, claiming a quit.
	unwrittenUndeleted = "undeleted"
)

// How an Event is written: each try bounded by eventTryTimeout, tried again
// after eventRetryMin (doubling, jittered, up to eventRetryMax) until its
// deadline; in the background, backgroundEventTimeout is the deadline.
const (
	eventTryTimeout        = 4 * time.Second
	eventRetryMin          = 100 * time.Millisecond
	eventRetryMax          = 2 * time.Second
	backgroundEventTimeout = time.Minute
)

// newEventLog writes Events about objects of scheme to sink. They are the
// function's, reported as names.SourceProxyQuit (makeEvent): kubectl
// istio-aux shows an Event as istio-aux's only when it names that
// reporter.
func newEventLog(sink eventSink, scheme *runtime.Scheme) *eventLog {
	ctx, stop := context.WithCancel(context.Background())
	return &eventLog{sink: sink, scheme: scheme, now: time.Now, background: backgroundEventTimeout,
		lost: func(*corev1.Event, string, error) {}, ctx: ctx, stop: stop, pending: map[*corev1.Event]struct{}{}}
}

// EventAndWait writes an Event about object and returns once it is
// written, refused for good, or ctx is done: nil if written. An Event
// written once (once: a pod's proxy is quit once) has a name of its own
// for the object and reason, so that another write of it (a redelivered
// event, a second replica) finds it there instead of adding one.
func (l *eventLog) EventAndWait(ctx context.Context, object runtime.Object, once bool, eventtype, reason, message string) error {
	e, err := l.makeEvent(object, once, eventtype, reason, message)
	if err != nil {
		return err
	}
	return l.write(ctx, e)
}

// DeleteAndWait deletes the Event of reason about object written once
// (EventAndWait with once), and returns once it is gone (or was never
// there), refused for good, or ctx is done: nil if gone. Its tries are
// the writes' (create). One it cannot delete is handed to lost, with the
// cause unwrittenUndeleted. It is not tracked for flush: it is made while
// its request waits, which the drain waits for, and one cut off by the
// process's end leaves the Event that a redelivery finds (its message is
// not acked).
func (l *eventLog) DeleteAndWait(ctx context.Context, object runtime.Object, reason string) error {
	e, err := l.makeEvent(object, true, "", reason, "")
	if err != nil {
		return err
	}
	err = l.retry(ctx, func(ctx context.Context) error {
		if err := l.sink.DeleteEvent(ctx, e.Namespace, e.Name); !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
	if err != nil {
		l.lost(e, unwrittenUndeleted, err)
	}
	return err
}

// Event implements record.EventRecorder: the Event is written in the
// background, until flush.
func (l *eventLog) Event(object runtime.Object, eventtype, reason, message string) {
	e, err := l.makeEvent(object, false, eventtype, reason, message)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.background)
	l.track(e)
	go func() {
		defer cancel()
		_ = l.settle(e, l.create(ctx, e))
	}()
}

// Eventf implements record.EventRecorder.
func (l *eventLog) Eventf(object runtime.Object, eventtype, reason, format string, args ...any) {
	l.Event(object, eventtype, reason, fmt.Sprintf(format, args...))
}

// AnnotatedEventf implements record.EventRecorder; the function's Events
// carry no annotations.
func (l *eventLog) AnnotatedEventf(object runtime.Object, _ map[string]string, eventtype, reason, format string, args ...any) {
	l.Eventf(object, eventtype, reason, format, args...)
}

// flush waits until every Event under way has been written or given up,
// or until ctx is done: then the rest are given up (lost, cause
// shutdown). It says how many were left.
func (l *eventLog) flush(ctx context.Context) error {
	defer l.stop()
	err := apiwait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.pending) == 0, nil
	})
	if err == nil {
		return nil
	}
	l.mu.Lock()
	left := l.pending
	l.pending = map[*corev1.Event]struct{}{}
	l.mu.Unlock()
	for e := range left {
		l.lost(e, unwrittenShutdown, err)
	}
	return fmt.Errorf("%d Kubernetes Events not written before the deadline: %w", len(left), err)
}

// write writes e, tracked until it is settled.
func (l *eventLog) write(ctx context.Context, e *corev1.Event) error {
	l.track(e)
	return l.settle(e, l.create(ctx, e))
}

func (l *eventLog) track(e *corev1.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending[e] = struct{}{}
}

// settle ends the tracking of e's write, which ended with err, and tells
// lost of an Event left unwritten, unless flush already has.
func (l *eventLog) settle(e *corev1.Event, err error) error {
	l.mu.Lock()
	_, mine := l.pending[e]
	delete(l.pending, e)
	l.mu.Unlock()
	if err != nil && mine {
		cause := unwrittenTimeout
		switch {
		case errors.Is(err, errEventRefused):
			cause = unwrittenRejected
		case l.ctx.Err() != nil && errors.Is(err, context.Canceled):
			cause = unwrittenShutdown // a background write, ended by flush
		}
		l.lost(e, cause, err)
	}
	return err
}

// errEventRefused marks an Event the API server refused for good.
var errEventRefused = errors.New("refused for good")

// create writes e until it is written, refused for good, or ctx is done.
// Every try sends e as it is, name included: a try that got through
// although its answer was lost makes the next one AlreadyExists, which is
// written.
func (l *eventLog) create(ctx context.Context, e *corev1.Event) error {
	return l.retry(ctx, func(ctx context.Context) error {
		if err := l.sink.CreateEvent(ctx, e); !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
}

// retry makes one call to the API server (try) until it succeeds, is
// refused for good (errEventRefused), or ctx is done; each try bounded by
// eventTryTimeout.
func (l *eventLog) retry(ctx context.Context, try func(context.Context) error) error {
	delay := eventRetryMin
	for {
		tctx, cancel := context.WithTimeout(ctx, eventTryTimeout)
		err := try(tctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case !retryable(err):
			return fmt.Errorf("%w: %w", errEventRefused, err)
		}
		// Jittered, so that the writes a failure held do not come back
		// all at once.
		t := time.NewTimer(delay/2 + rand.N(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last try: %w)", ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, eventRetryMax)
	}
}

// retryable says whether a failed write may succeed when tried again: no
// answer (the connection lost, a try's timeout), or the API server's
// answer that it cannot take it now (429, 5xx). Any other answer (403,
// 404 namespace gone, 422 invalid) would be the same the next time.
func retryable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		var construction *rest.RequestConstructionError
		return !errors.As(err, &construction)
	}
	code := status.Status().Code
	return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
}

// makeEvent is the core/v1 Event client-go's recorder would make, but for
// the name of an Event written once.
func (l *eventLog) makeEvent(object runtime.Object, once bool, eventtype, reason, message string) (*corev1.Event, error) {
	ref, err := reference.GetReference(l.scheme, object)
	if err != nil {
		return nil, fmt.Errorf("referring to the Event's object: %w", err)
	}
	t := metav1.NewTime(l.now())
	name := util.GenerateEventName(ref.Name, t.UnixNano())
	if once {
		name = onceEventName(ref, reason)
	}
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: cmp.Or(ref.Namespace, metav1.NamespaceDefault)},
		InvolvedObject: *ref,
		Reason:         reason,
		Message:        message,
		FirstTimestamp: t,
		LastTimestamp:  t,
		Count:          1,
		Type:           eventtype,
		// The reporter, where client-go's recorder writes it: in both
		// fields (the events.k8s.io API reads reportingController).
		Source:              corev1.EventSource{Component: names.SourceProxyQuit},
		ReportingController: names.SourceProxyQuit,
	}, nil
}

// onceEventName is the name of the one Event of reason about ref: the
// object's name and a hash of its identity (uid included: a pod re-created
// under the same name is another pod) and the reason, shaped like
// client-go's names (name.hex).
func onceEventName(ref *corev1.ObjectReference, reason string) string {
	h := fnv.New64a()
	for _, s := range []string{ref.Namespace, ref.Name, string(ref.UID), reason} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	suffix := fmt.Sprintf(".%016x", h.Sum64())
	// An object's name is a DNS subdomain; cut, it must still end with an
	// alphanumeric character.
	base := ref.Name[:min(len(ref.Name), 253-len(suffix))]
	return strings.TrimRight(base, ".-") + suffix
}

var _ record.EventRecorder = (*eventLog)(nil)
