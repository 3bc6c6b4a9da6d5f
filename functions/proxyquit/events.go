package proxyquit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
)

// eventLog writes the function's Kubernetes Events through client-go's
// broadcaster, in the background as it always does, and can be flushed: the
// broadcaster's own Shutdown drops what it has not written yet, so a quit
// done just before the process ends would keep no ProxyQuit Event. It counts
// the Events recorded and the writes the sink was asked for; a flush waits
// until every Event recorded has had its first write.
type eventLog struct {
	broadcaster       record.EventBroadcaster
	recorded, written atomic.Int64
}

// newEventLog starts writing Events to sink, and returns the recorder to
// record them with, for source.
func newEventLog(sink record.EventSink, source corev1.EventSource, scheme *runtime.Scheme) (*eventLog, record.EventRecorder) {
	l := &eventLog{broadcaster: record.NewBroadcaster()}
	l.broadcaster.StartRecordingToSink(countingSink{sink, &l.written})
	return l, countingRecorder{l.broadcaster.NewRecorder(scheme, source), &l.recorded}
}

// flush waits until every Event recorded so far has been written (a write
// that failed counts: client-go retries it, and the deadline bounds that),
// or until ctx is done, then stops the broadcaster. It says how many Events
// were left unwritten.
func (l *eventLog) flush(ctx context.Context) error {
	defer l.broadcaster.Shutdown()
	err := apiwait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		return l.written.Load() >= l.recorded.Load(), nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d Kubernetes Events not written before the deadline: %w",
			l.recorded.Load()-l.written.Load(), l.recorded.Load(), err)
	}
	return nil
}

// countingRecorder counts the Events recorded.
type countingRecorder struct {
	record.EventRecorder
	n *atomic.Int64
}

func (r countingRecorder) Event(o runtime.Object, eventtype, reason, message string) {
	r.n.Add(1)
	r.EventRecorder.Event(o, eventtype, reason, message)
}

func (r countingRecorder) Eventf(o runtime.Object, eventtype, reason, format string, args ...any) {
	r.n.Add(1)
	r.EventRecorder.Eventf(o, eventtype, reason, format, args...)
}

func (r countingRecorder) AnnotatedEventf(o runtime.Object, annotations map[string]string, eventtype, reason, format string, args ...any) {
	r.n.Add(1)
	r.EventRecorder.AnnotatedEventf(o, annotations, eventtype, reason, format, args...)
}

// countingSink counts the writes it was asked for, once each is done.
type countingSink struct {
	record.EventSink
	n *atomic.Int64
}

func (s countingSink) Create(e *corev1.Event) (*corev1.Event, error) {
	defer s.n.Add(1)
	return s.EventSink.Create(e)
}

func (s countingSink) Update(e *corev1.Event) (*corev1.Event, error) {
	defer s.n.Add(1)
	return s.EventSink.Update(e)
}

func (s countingSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	defer s.n.Add(1)
	return s.EventSink.Patch(e, data)
}
