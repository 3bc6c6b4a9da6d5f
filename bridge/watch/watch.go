// Package watch is the bridge's producer side: informers over slim pods and
// namespaces, a rate-limited work queue keyed by pod, and workers that run
// the change filter and publish an event for each state worth acting on.
package watch

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/istio-aux/istio-aux/bridge/filter"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/functions/decision"
	"github.com/istio-aux/istio-aux/functions/podevent"
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
	// Mode picks which pods are published.
	Mode filter.Mode
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
}

// New builds the informers and registers the handlers; Run starts them.
func New(lists Lists, pub Publisher, m *metrics.Bridge, o Options) *Watcher {
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.Mode == "" {
		o.Mode = filter.ModeQuit
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
	_ = pods.SetTransform(CompactPod)
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

func (w *Watcher) work(ctx context.Context) {
	for w.processNext(ctx) {
	}
}

func (w *Watcher) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if err := w.sync(ctx, key); err != nil {
		w.retry(ctx, key, err)
	}
	return true
}

// retry re-queues a pod with back-off. Nothing is ever dropped: a pod that
// cannot be published is retried until it can, or until it no longer needs
// publishing.
func (w *Watcher) retry(ctx context.Context, key string, err error) {
	w.m.Retries.Inc()
	n := w.queue.NumRequeues(key)
	log := logging.FromContext(ctx).Desugar()
	if n < 3 {
		log.Info("Retrying pod event", zap.String("pod", key), zap.Int("requeues", n), zap.Error(err))
	} else {
		log.Warn("Pod event still not published", zap.String("pod", key), zap.Int("requeues", n), zap.Error(err))
	}
	w.queue.AddRateLimited(key)
}

// sync runs the change filter for one pod and publishes if it says so.
func (w *Watcher) sync(ctx context.Context, key string) error {
	obj, exists, err := w.pods.GetIndexer().GetByKey(key)
	if err != nil {
		return fmt.Errorf("reading %s from the cache: %w", key, err)
	}
	if !exists {
		w.published.forget(key)
		w.queue.Forget(key)
		return nil
	}
	// Pod() unpacks the cached object into a new slim pod: the cache itself
	// is never handed out, so it cannot be modified.
	cached, ok := obj.(*CachedPod)
	if !ok {
		return fmt.Errorf("cache holds a %T for %s, not a *CachedPod", obj, key)
	}
	pod := cached.Pod()
	var nsLabels map[string]string
	if nsObj, ok, _ := w.nss.GetIndexer().GetByKey(pod.Namespace); ok {
		nsLabels = nsObj.(*corev1.Namespace).Labels
	}
	last, hasLast := w.published.get(key)
	v := filter.Evaluate(w.o.Mode, w.o.Decision, filter.Input{Pod: pod, NamespaceLabels: nsLabels, Last: last, HasLast: hasLast})
	w.m.Filtered.WithLabelValues(v.Reason).Inc()
	if !v.Publish {
		if !v.OptedIn {
			w.published.forget(key)
		}
		w.queue.Forget(key)
		return nil
	}
	e, err := podevent.New(w.o.Source, pod)
	if err != nil {
		// A pod that cannot be JSON-encoded will not encode on a retry.
		w.m.PublishErrors.WithLabelValues("encode").Inc()
		logging.FromContext(ctx).Errorw("Encoding pod event", zap.String("pod", key), zap.Error(err))
		return nil
	}
	fp := v.Fingerprint
	w.published.set(key, fp)
	err = w.pub.Publish(ctx, &e, filter.DedupID(pod.UID, fp), func(err error) {
		if err != nil {
			w.published.forgetIf(key, fp)
			w.retry(ctx, key, err)
			return
		}
		w.queue.Forget(key)
	})
	if err != nil {
		w.published.forgetIf(key, fp)
		return err
	}
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
	oldPod, ok1 := oldObj.(*CachedPod)
	newPod, ok2 := newObj.(*CachedPod)
	if ok1 && ok2 && oldPod.ResourceVersion() == newPod.ResourceVersion() {
		// A periodic resync. Pods still deciding Quit are published again
		// (after the dedup window this reaches the function anew); others
		// are left alone.
		w.m.WatchEvents.WithLabelValues("pod", "resync").Inc()
		if decision.Decide(newPod.Pod(), w.o.Decision).Outcome != decision.Quit {
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
