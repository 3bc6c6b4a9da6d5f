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
// eventTimeout, not by the caller: a caller that gave up delivers the
// event again, and that delivery most often finds the proxy stopped and
// nothing to do, so this write is still the record. An Event that cannot
// be written is counted and logged with the pod's name (unwrittenEvent),
// and a quit is still answered 2xx: a redelivery could not write it
// either, as it cannot tell that quit from a proxy stopped by other means
// (it writes one only when the proxy stops under its own exec: quit). An
// Event with once set is written once per pod and reason (a pod's proxy
// is quit once). A recorder that cannot wait (New's caller's) records as
// it does.
func (f *Function) record(ctx context.Context, pod *corev1.Pod, once bool, eventtype, reason, message string) {
	w, ok := f.recorder.(eventWaiter)
	if !ok {
		f.recorder.Event(pod, eventtype, reason, message)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.eventTimeout)
	defer cancel()
	_ = w.EventAndWait(ctx, pod, once, eventtype, reason, message)
}

// unwrittenEvent counts an Event left unwritten and logs it, with its
// object's name: for a ProxyQuit Event, a quit that has no record on its
// pod but this.
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
