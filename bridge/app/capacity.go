package app

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/watch"
)

// cgroupMemoryMax is where a container reads its memory limit (cgroup v2,
// as every supported kubelet runs it).
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// embeddedReserve is the memory the all-in-one's embedded nats-server
// (JetStream included) and in-process function take from the container's
// limit before the watcher's capacity is counted. Without pods they add
// about 5 MiB to the bridge's RSS (make bench, memory part); JetStream's
// caches grow with a backlog of events, which the rest leaves room for.
const embeddedReserve = 64 << 20

// memoryLimit is the container's memory limit in bytes, 0 when it has none
// (or it cannot be read: no refusal is better than a wrong one).
func memoryLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil { // "max"
		return 0
	}
	return n
}

// ReasonOverCapacity is the Event's reason when the watcher refuses.
const ReasonOverCapacity = "OverCapacity"

// refusals run the watcher again after it refused (watch.CapacityError):
// its caches are dropped, the refusal is logged, counted and recorded as an
// Event on the bridge's pod, and the watcher tries again after a back-off
// (1 minute, doubling to 15): the pods to serve may have finished, or the
// limit have been raised meanwhile (a new pod, a new limit). Dispatching
// goes on in the meantime.
type refusals struct {
	m        *metrics.Bridge
	recorder record.EventRecorder // nil: no Event
	pod      *corev1.ObjectReference
	first    time.Duration
}

// run runs term until it returns something else than a refusal, or ctx is
// done.
func (r refusals) run(ctx context.Context, term func(context.Context) error) error {
	delay := r.first
	for {
		err := term(ctx)
		var ce *watch.CapacityError
		if !errors.As(err, &ce) {
			r.m.OverCapacity.Set(0)
			return err
		}
		r.m.OverCapacity.Set(1)
		logging.FromContext(ctx).Errorw("Not watching: too many pods for the memory limit; quits stop until this is solved",
			zap.Error(ce), zap.Duration("retry", delay))
		if r.recorder != nil && r.pod != nil {
			r.recorder.Eventf(r.pod, corev1.EventTypeWarning, ReasonOverCapacity, "%v (next try in %v)", ce, delay)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 15*time.Minute)
	}
}
