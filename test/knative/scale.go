package knative

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/poll"
)

// Scale is what a Knative Service's pods did while a ScaleWatch ran: the
// autoscaler's decisions as the node carried them out.
type Scale struct {
	// Pods is every pod of the Service seen, by name, with when it was
	// first seen ready (zero if never).
	Pods map[string]time.Time
	// MaxReady is the most pods ready at once.
	MaxReady int
	// MaxReplicas is the most replicas the autoscaler asked of the
	// Service's Deployments at once.
	MaxReplicas int32
	// LastReady is the last time a pod was seen ready.
	LastReady time.Time
}

// ScaleWatch polls a Knative Service's pods until stopped.
type ScaleWatch struct {
	mu   sync.Mutex
	s    Scale
	stop context.CancelFunc
	done chan struct{}
}

// WatchScale starts watching the pods and Deployments of the Knative
// Service ns/name, every 100 ms (two lists cost little on one node; a
// watch would see the same).
func WatchScale(ctx context.Context, c *cluster.Cluster, ns, name string) *ScaleWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &ScaleWatch{s: Scale{Pods: map[string]time.Time{}}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: PodSelector(name)})
			if err == nil {
				w.observe(pods.Items, time.Now())
			}
			deps, err := c.Client().AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: PodSelector(name)})
			if err == nil {
				var replicas int32
				for _, d := range deps.Items {
					replicas += ptr.Deref(d.Spec.Replicas, 0)
				}
				w.mu.Lock()
				w.s.MaxReplicas = max(w.s.MaxReplicas, replicas)
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *ScaleWatch) observe(pods []corev1.Pod, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ready := 0
	for _, p := range pods {
		seen, ok := w.s.Pods[p.Name]
		if !cluster.PodReady(&p) {
			if !ok {
				w.s.Pods[p.Name] = time.Time{}
			}
			continue
		}
		ready++
		if seen.IsZero() {
			w.s.Pods[p.Name] = now
		}
	}
	w.s.MaxReady = max(w.s.MaxReady, ready)
	if ready > 0 {
		w.s.LastReady = now
	}
}

// Stop stops the watch and returns what it saw.
func (w *ScaleWatch) Stop() Scale {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.s
}

// WaitZero waits until the Knative Service ns/name has no pods at all: the
// autoscaler scaled its revisions to zero and the last pod finished its
// drain (queue-proxy waits 30 s before it exits).
func WaitZero(ctx context.Context, c *cluster.Cluster, ns, name string, timeout time.Duration) error {
	return poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: PodSelector(name)})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0, nil
	})
}

// ScaledToZero reports whether every Deployment of the Knative Service
// ns/name (one per revision) wants no pods: the autoscaler's decision,
// ≈ 30 s before the last pod is gone.
func ScaledToZero(ctx context.Context, c *cluster.Cluster, ns, name string) (bool, error) {
	deps, err := c.Client().AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: PodSelector(name)})
	if err != nil {
		return false, err
	}
	for _, d := range deps.Items {
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
			return false, nil
		}
	}
	return len(deps.Items) > 0, nil
}

// Percentile is the nearest-rank q-quantile of unsorted durations (0 for
// none).
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}
