// Package watch is the bridge's producer side: informers over slim pods and
// namespaces, a rate-limited work queue keyed by pod, and workers that run
// the change filter and publish an event for each state worth acting on.
package watch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// Publisher sends one event with a JetStream dedup id. A returned error
// means nothing was sent; otherwise done is called exactly once with the
// outcome of the ack.
type Publisher interface {
	Publish(ctx context.Context, e *event.Event, dedupID string, done func(error)) error
}

// Lists are where a Watcher lists and watches. Pods should apply
// PodFieldSelector where the server can (the filter checks anyway).
// Production passes internal/kube's; tests, a fake clientset's.
type Lists struct {
	Pods, Namespaces cache.ListerWatcher
}

// Options configure a Watcher.
type Options struct {
	// Source is the CloudEvent source (cluster name or API server URL).
	Source string
	// PublishWaits publishes every state change of pods deciding Wait too,
	// not only Quit: what test/cmd/record uses to record scenarios. The
	// bridge binary never sets it.
	PublishWaits bool
	// Decision carries the configured extra sidecars.
	Decision decision.Options
	// Resync re-delivers every cached pod this often; pods still deciding
	// Quit are republished. 0 disables it.
	Resync time.Duration
	// Workers publishing in parallel (default 2).
	Workers int
	// RateLimiter spaces out retries of a pod (default: exponential,
	// 10ms to 30s).
	RateLimiter workqueue.TypedRateLimiter[string]
}

// Watcher watches pods and publishes their events.
type Watcher struct {
	o         Options
	pub       Publisher
	m         *metrics.Bridge
	pods      cache.SharedIndexInformer
	nss       cache.SharedIndexInformer
	queue     workqueue.TypedRateLimitingInterface[string]
	published *published
	synced    atomic.Bool
	// failing holds the keys waiting out a back-off (RetryNow).
	failing sync.Map
}

// New builds the informers and registers the handlers; Run starts them.
func New(lists Lists, pub Publisher, m *metrics.Bridge, o Options) *Watcher {
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.RateLimiter == nil {
		o.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, 30*time.Second)
	}
	pods := cache.NewSharedIndexInformerWithOptions(lists.Pods, &corev1.Pod{}, cache.SharedIndexInformerOptions{
		ResyncPeriod: o.Resync,
		Indexers:     cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
	})
	nss := cache.NewSharedIndexInformerWithOptions(lists.Namespaces, &corev1.Namespace{}, cache.SharedIndexInformerOptions{})
	// Only fails on a started informer; these are new.
	_ = pods.SetTransform(slim.PackTransform)
	_ = nss.SetTransform(SlimNamespace)
	w := &Watcher{
		o: o, pub: pub, m: m,
		pods: pods,
		nss:  nss,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(o.RateLimiter,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "istio-aux-pods"}),
		published: newPublished(),
	}
	// Registration only fails on a stopped informer; these are new.
	_, _ = w.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.onPodAdd,
		UpdateFunc: w.onPodUpdate,
		DeleteFunc: w.onPodDelete,
	})
	_, _ = w.nss.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: w.onNamespaceUpdate})
	return w
}

// Synced reports whether both caches have their initial lists (readiness).
func (w *Watcher) Synced() bool { return w.synced.Load() }

// Run starts the informers, waits for their caches and runs the workers
// until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	logger := logging.FromContext(ctx)
	defer w.queue.ShutDown()
	var informers sync.WaitGroup
	defer informers.Wait()
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	informers.Go(func() { w.pods.RunWithContext(ictx) })
	informers.Go(func() { w.nss.RunWithContext(ictx) })
	if !cache.WaitForCacheSync(ctx.Done(), w.pods.HasSynced, w.nss.HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("pod and namespace caches did not sync")
	}
	w.synced.Store(true)
	logger.Infow("Caches synced", zap.Int("pods", len(w.pods.GetStore().ListKeys())))
	var wg sync.WaitGroup
	for range w.o.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, w.work, time.Second) })
	}
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	return nil
}

func (w *Watcher) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		w.queue.Add(key)
	}
}

func (w *Watcher) onPodAdd(obj any) {
	w.m.WatchEvents.WithLabelValues("pod", "add").Inc()
	w.enqueue(obj)
}

func (w *Watcher) onPodUpdate(oldObj, newObj any) {
	oldPod, ok1 := oldObj.(*slim.Packed)
	newPod, ok2 := newObj.(*slim.Packed)
	if ok1 && ok2 && oldPod.ResourceVersion() == newPod.ResourceVersion() {
		// A periodic resync. Pods still deciding Quit are published again
		// (after the dedup window this reaches the function anew); others
		// are left alone.
		w.m.WatchEvents.WithLabelValues("pod", "resync").Inc()
		if decision.Decide(newPod.Unpack(), w.o.Decision).Outcome != decision.Quit {
			return
		}
		if key, err := cache.MetaNamespaceKeyFunc(newPod); err == nil {
			w.published.forget(key)
			w.queue.Add(key)
		}
		return
	}
	w.m.WatchEvents.WithLabelValues("pod", "update").Inc()
	w.enqueue(newObj)
}

func (w *Watcher) onPodDelete(obj any) {
	w.m.WatchEvents.WithLabelValues("pod", "delete").Inc()
	w.enqueue(obj)
}

// onNamespaceUpdate re-evaluates a namespace's pods when its labels change:
// opting a namespace in must reach pods that finished before.
func (w *Watcher) onNamespaceUpdate(oldObj, newObj any) {
	oldNS, ok1 := oldObj.(*corev1.Namespace)
	newNS, ok2 := newObj.(*corev1.Namespace)
	if !ok1 || !ok2 {
		return
	}
	w.m.WatchEvents.WithLabelValues("namespace", "update").Inc()
	if decision.NamespaceOptedIn(oldNS.Labels) == decision.NamespaceOptedIn(newNS.Labels) {
		return
	}
	objs, err := w.pods.GetIndexer().ByIndex(cache.NamespaceIndex, newNS.Name)
	if err != nil {
		return
	}
	for _, o := range objs {
		w.enqueue(o)
	}
}
