// Package watch is the bridge's producer side: a namespace informer, one
// watch of slim pods per namespace in scope (ScopeOf), a rate-limited work
// queue keyed by pod, and workers that run the change filter and publish an
// event for each state worth acting on.
package watch

import (
	"context"
	"errors"
	"slices"
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
)

// Publisher sends one event with a JetStream dedup id. A returned error
// means nothing was sent; otherwise done is called exactly once with the
// outcome of the ack.
type Publisher interface {
	Publish(ctx context.Context, e *event.Event, dedupID string, done func(error)) error
}

// Lists are where a Watcher lists and watches: every namespace, and the
// pods of one namespace at a time. Production passes KubeLists; tests, a
// fake clientset's.
type Lists struct {
	Namespaces cache.ListerWatcher
	// Pods lists and watches the pods of namespace that match labelSelector
	// ("": all). It should apply PodFieldSelector where the server can (the
	// filter checks anyway).
	Pods func(namespace, labelSelector string) cache.ListerWatcher
}

// Options configure a Watcher.
type Options struct {
	// Source is the CloudEvent source (cluster name or API server URL).
	Source string
	// PublishWaits publishes every state change of pods deciding Wait too,
	// not only Quit: what test/cmd/record uses to record scenarios. The
	// bridge binary never sets it.
	PublishWaits bool
	// Decision carries the configured extra sidecars and quit-native, as
	// at start (Reconfigure changes them).
	Decision decision.Options
	// Resync re-delivers every cached pod this often; pods still deciding
	// Quit are republished. 0 disables it. Reconfigure changes it.
	Resync time.Duration
	// Workers publishing in parallel (default 2).
	Workers int
	// RateLimiter spaces out retries of a pod (default: exponential,
	// 10ms to 30s).
	RateLimiter workqueue.TypedRateLimiter[string]
}

// Watcher watches the namespaces, the pods of those opted in, and
// publishes the pods' events.
type Watcher struct {
	o     Options
	pub   Publisher
	m     *metrics.Bridge
	lists Lists
	nss   cache.SharedIndexInformer
	// nsSynced: the namespace handler has seen the initial list.
	nsSynced  cache.InformerSynced
	pods      *podWatches
	queue     workqueue.TypedRateLimitingInterface[string]
	published *published
	synced    atomic.Bool
	// failing holds the keys waiting out a back-off (RetryNow).
	failing sync.Map
	// decision and resync are the settings in force (Reconfigure);
	// resyncChanged wakes the resync loop when the period changes.
	decision      atomic.Pointer[decision.Options]
	resync        atomic.Int64
	resyncChanged chan struct{}
}

// New builds the namespace informer and registers its handler; Run starts
// it and, from it, one pod watch per namespace in scope (ScopeOf).
func New(lists Lists, pub Publisher, m *metrics.Bridge, o Options) *Watcher {
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.RateLimiter == nil {
		o.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, 30*time.Second)
	}
	nss := cache.NewSharedIndexInformerWithOptions(lists.Namespaces, &corev1.Namespace{}, cache.SharedIndexInformerOptions{})
	// Only fails on a started informer; this one is new.
	_ = nss.SetTransform(SlimNamespace)
	w := &Watcher{
		o: o, pub: pub, m: m, lists: lists,
		nss: nss,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(o.RateLimiter,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "istio-aux-pods"}),
		published:     newPublished(),
		resyncChanged: make(chan struct{}, 1),
	}
	w.decision.Store(&o.Decision)
	w.resync.Store(int64(o.Resync))
	w.pods = newPodWatches(w)
	// Registration only fails on a stopped informer; this one is new.
	reg, _ := w.nss.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onNamespace("add", obj) },
		UpdateFunc: w.onNamespaceUpdate,
		DeleteFunc: func(obj any) { w.onNamespace("delete", obj) },
	})
	w.nsSynced = reg.HasSynced
	return w
}

// Synced reports whether the namespaces and the pods of every namespace in
// scope at start have been listed (readiness). Namespaces opted in later
// do not make it false again.
func (w *Watcher) Synced() bool { return w.synced.Load() }

// CachedPods is the number of pods the watches hold.
func (w *Watcher) CachedPods() int { return w.pods.cached() }

// Run starts the namespace informer, starts the pod watches of the
// namespaces in scope, waits for all of them to list, and runs the workers
// until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	logger := logging.FromContext(ctx)
	defer w.queue.ShutDown()
	// Deferred in reverse: cancel the informer, the namespace queue and
	// every pod watch, wait for the goroutines, then for each pod watch to
	// end.
	defer w.pods.stopAll()
	var informers sync.WaitGroup
	defer informers.Wait()
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	informers.Go(func() { w.nss.RunWithContext(ictx) })
	if !cache.WaitForCacheSync(ctx.Done(), w.nss.HasSynced, w.nsSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("namespace cache did not sync")
	}
	// The namespaces listed so far get their watches now, so that
	// readiness means their pods are listed too; later changes go through
	// the namespace queue.
	for _, name := range w.nss.GetStore().ListKeys() {
		w.pods.reconcile(ictx, name)
	}
	informers.Go(func() { w.pods.run(ictx) })
	if !cache.WaitForCacheSync(ctx.Done(), w.pods.hasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("pod caches did not sync")
	}
	w.synced.Store(true)
	logger.Infow("Caches synced", zap.Int("namespaces", w.pods.count()), zap.Int("pods", w.pods.cached()))
	var wg sync.WaitGroup
	for range w.o.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, w.work, time.Second) })
	}
	wg.Go(func() { w.resyncLoop(ctx) })
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	return nil
}

// Reconfigure applies a change of settings: the decision's options at once
// to every pod (a resync now publishes those that decide Quit under the new
// options), the resync period from the next period on.
func (w *Watcher) Reconfigure(o decision.Options, resync time.Duration) {
	old := w.decision.Swap(&o)
	if time.Duration(w.resync.Swap(int64(resync))) != resync {
		select {
		case w.resyncChanged <- struct{}{}:
		default:
		}
	}
	if !slices.Equal(old.ExtraSidecars, o.ExtraSidecars) || old.QuitNative != o.QuitNative {
		w.resyncAll()
	}
}

// options is the decision's configuration in force.
func (w *Watcher) options() decision.Options { return *w.decision.Load() }

// resyncLoop resyncs every cached pod each resync period (the period read
// anew after each, or when Reconfigure changes it); none while it is 0.
func (w *Watcher) resyncLoop(ctx context.Context) {
	t := time.NewTimer(0)
	t.Stop()
	defer t.Stop()
	for {
		var tick <-chan time.Time
		if d := time.Duration(w.resync.Load()); d > 0 {
			t.Reset(d)
			tick = t.C
		}
		select {
		case <-ctx.Done():
			return
		case <-w.resyncChanged:
			t.Stop()
		case <-tick:
			w.resyncAll()
		}
	}
}

// resyncAll resyncs the cache of every watched namespace.
func (w *Watcher) resyncAll() {
	for _, s := range w.pods.stores() {
		_ = s.Resync() // never fails
	}
}

// transform packs a pod for the cache and counts it: every pod a watch
// receives from the API server passes here once (a resync or a deletion
// tombstone passes objects already packed).
func (w *Watcher) transform(obj any) (any, error) {
	if _, ok := obj.(*corev1.Pod); ok {
		w.m.PodsDecoded.Inc()
	}
	return PackTransform(obj)
}

// onNamespace queues a namespace added or deleted: its pod watch starts
// or stops.
func (w *Watcher) onNamespace(op string, obj any) {
	w.m.WatchEvents.WithLabelValues("namespace", op).Inc()
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		w.pods.queue.Add(key)
	}
}

// onNamespaceUpdate queues a namespace whose scope changed: opting it in
// starts the watch of its pods, whose first list reaches pods that
// finished before; opting it out stops the watch and drops its cache.
func (w *Watcher) onNamespaceUpdate(oldObj, newObj any) {
	oldNS, ok1 := oldObj.(*corev1.Namespace)
	newNS, ok2 := newObj.(*corev1.Namespace)
	if !ok1 || !ok2 {
		return
	}
	w.m.WatchEvents.WithLabelValues("namespace", "update").Inc()
	if ScopeOf(oldNS.Labels) != ScopeOf(newNS.Labels) {
		w.pods.queue.Add(newNS.Name)
	}
}
