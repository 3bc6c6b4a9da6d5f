package proxyquit

import (
	"context"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// eventWaiter is a recorder that writes an Event while its caller waits
// (eventLog.EventAndWait), and deletes one written once (DeleteAndWait).
type eventWaiter interface {
	EventAndWait(ctx context.Context, object runtime.Object, once bool, eventtype, reason, message string) error
	DeleteAndWait(ctx context.Context, object runtime.Object, reason string) error
}

// record writes an Event about pod and returns once it is written or
// given up; the request answers after it. Why here, rather than a flush
// at shutdown that waits for each Event's outcome: the answer to a quit
// acks its message, after which nothing delivers it again, and under
// Knative the process gets SIGTERM only about 2 s before its SIGKILL
// (eventLog), while a request under way is waited for by queue-proxy, by
// the HTTP server's drain and by the dispatcher. The wait is bounded by
// eventTimeout, not by the caller (recordContext). An Event that cannot
// be written is counted and logged with the pod's name (unwrittenEvent).
// A quit's ProxyQuit Event is written before its exec (Function.quit),
// with the same bound, and no quit is made without it. An Event with
// once set is written once per pod and reason (a pod's proxy is quit
// once). A recorder that cannot wait (New's caller's) records as it does.
func (f *Function) record(ctx context.Context, pod *corev1.Pod, once bool, eventtype, reason, message string) {
	ctx, cancel := f.recordContext(ctx)
	defer cancel()
	f.recordWithin(ctx, pod, once, eventtype, reason, message)
}

// recordContext bounds a request's Kubernetes Events by eventTimeout, not
// by its caller: a caller that gave up delivers the event again, but the
// record of what this delivery did is this one's to write.
func (f *Function) recordContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), f.eventTimeout)
}

// recordWithin is record within ctx (from recordContext), which other
// writes of the same request may share.
func (f *Function) recordWithin(ctx context.Context, pod *corev1.Pod, once bool, eventtype, reason, message string) {
	w, ok := f.recorder.(eventWaiter)
	if !ok {
		f.recorder.Event(pod, eventtype, reason, message)
		return
	}
	_ = w.EventAndWait(ctx, pod, once, eventtype, reason, message)
}

// unwrittenEvent counts an Event left unwritten and logs it, with its
// object's name: for a ProxyQuit Event, a quit not made for want of its
// record (or, cause unwrittenUndeleted, the record of a quit that failed,
// left on its pod).
func unwrittenEvent(logger *zap.SugaredLogger, m *Metrics) func(*corev1.Event, string, error) {
	return func(e *corev1.Event, cause string, err error) {
		m.eventsUnwritten.WithLabelValues(e.Reason, cause).Inc()
		o := e.InvolvedObject
		msg := "Kubernetes Event not written (istio_aux_proxyquit_events_unwritten_total counts it)"
		if cause == unwrittenUndeleted {
			msg = "Kubernetes Event not deleted: it claims a quit that failed (istio_aux_proxyquit_events_unwritten_total counts it)"
		}
		logger.Errorw(msg,
			zap.String("kind", o.Kind), zap.String("namespace", o.Namespace), zap.String("name", o.Name),
			zap.String("reason", e.Reason), zap.String("message", e.Message), zap.String("cause", cause), zap.Error(err))
	}
}
