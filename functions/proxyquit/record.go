package proxyquit

import (
	"context"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// eventWaiter is a recorder that writes an Event while its caller waits
// (eventLog.EventAndWait).
type eventWaiter interface {
	EventAndWait(ctx context.Context, object runtime.Object, once bool, eventtype, reason, message string) error
}

// record writes an Event about pod before the request answers. Why before:
// the answer to a quit acks its message, after which nothing delivers it
// again; an Event still to be written then lives only in this process,
// which Knative may stop as soon as the burst is over (eventLog says how
// that lost quits' records). The wait is bounded by eventTimeout, not by
// the caller: a caller that gave up (its timeout) delivers the event
// again, and that delivery most often finds the proxy stopped and nothing
// to do, so this write is the record. An Event with once set is written once per pod and
// reason (a pod's proxy is quit once). An Event left unwritten is counted
// and logged with the pod's name (unwrittenEvent). A recorder that cannot
// wait (New's caller's) records as it does.
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
		logger.Errorw("Kubernetes Event not written (istio_aux_proxyquit_events_unwritten_total counts it)",
			zap.String("kind", o.Kind), zap.String("namespace", o.Namespace), zap.String("name", o.Name),
			zap.String("reason", e.Reason), zap.String("message", e.Message), zap.String("cause", cause), zap.Error(err))
	}
}
