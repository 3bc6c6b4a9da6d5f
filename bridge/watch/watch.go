// Package watch is the bridge's producer side: a namespace informer, one
// cluster-wide watch of the pods the webhook labelled (keys.LabelWatched),
// a sweep and per-namespace watches for opted-in pods not labelled so
// (strays.go), a rate-limited work queue keyed by pod, and workers that run
// the change filter and publish an event for each state worth acting on.
// What the API server sends the bridge is the pods it serves, however many
// namespaces are opted in (docs/design.md, "The largest clusters").
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
)

// Publisher sends one event with a JetStream dedup id. A returned error
// means nothing was sent; otherwise done is called exactly once with the
// outcome of the ack.
type Publisher interface {
	Publish(ctx context.Context, e *event.Event, dedupID string, done func(error)) error
}

// Lists are where a Watcher lists and watches: every namespace, pods by a
// label selector, and pods' metadata. Production passes KubeLists; tests, a
// fake clientset's.
type Lists struct {
	Namespaces cache.ListerWatcher
	// Pods lists and watches the pods of namespace ("": every namespace)
	// that match labelSelector. It should apply PodFieldSelector where the
	// server can (the filter checks anyway).
	Pods func(namespace, labelSelector string) cache.ListerWatcher
	// Strays calls each with the metadata of every pod, in every namespace,
	// that matches labelSelector (and PodFieldSelector where the server
	// can), a page at a time.
	Strays func(ctx context.Context, labelSelector string, each func(*metav1.PartialObjectMetadata)) error
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
	// MaxPods is the most pods the watcher holds (0: no limit): past it,
	// Run drops its caches and returns a *CapacityError rather than grow
	// until its container is OOM-killed (Capacity).
	MaxPods int
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
	nsSynced cache.InformerSynced
	// scopes are the namespaces in scope as the handler last saw them
	// (the WatchedNamespaces gauge's share of this watcher).
	scopesMu sync.Mutex
	scopes   map[string]Scope
	// labelled is the cluster-wide watch's cache; strays, the
	// per-namespace watches of pods not labelled; catchUps, the namespaces
	// whose labelled pods are to be listed (catchup.go).
	labelled *podStore
	strays   *strayWatches
	catchUps workqueue.TypedRateLimitingInterface[string]
	// cached counts the pods of every cache, charged what they count
	// against the capacity (Packed.Units); over Options.MaxPods, refuse
	// cancels Run with a *CapacityError.
	cached    atomic.Int64
	charged   atomic.Int64
	refuse    context.CancelCauseFunc
	queue     workqueue.TypedRateLimitingInterface[string]
	published *published
	synced    atomic.Bool
	// refused is set before Run's context is cancelled for capacity: a
	// refusing watcher is not ready, whatever Run set before it saw it.
	refused atomic.Bool
	// failing holds the keys waiting out a back-off (RetryNow).
	failing sync.Map
	// decision and resync are the settings in force (Reconfigure);
	// resyncChanged wakes the resync loop when the period changes.
	decision      atomic.Pointer[decision.Options]
	resync        atomic.Int64
	resyncChanged chan struct{}
}

// New builds the namespace informer and registers its handler; Run starts
// it, the cluster-wide pod watch and the sweep.
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
		scopes:        map[string]Scope{},
		refuse:        func(error) {},
	}
	w.decision.Store(&o.Decision)
	w.resync.Store(int64(o.Resync))
	w.labelled = newPodStore(w, true)
	w.strays = newStrayWatches(w)
	w.catchUps = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "istio-aux-catch-up"})
	// Registration only fails on a stopped informer; this one is new.
	reg, _ := w.nss.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onNamespace("add", obj) },
		UpdateFunc: func(_, obj any) { w.onNamespace("update", obj) },
		DeleteFunc: func(obj any) { w.onNamespace("delete", obj) },
	})
	w.nsSynced = reg.HasSynced
	return w
}

// Synced reports whether the namespaces and the labelled pods have been
// listed (readiness), by a Run that is still serving: not once it has
// refused for capacity or returned. Pods not labelled are found after it,
// by the sweep.
func (w *Watcher) Synced() bool { return w.synced.Load() && !w.refused.Load() }

// CachedPods is the number of pods the watches hold.
func (w *Watcher) CachedPods() int { return int(w.cached.Load()) }

// Run starts the namespace informer and, once it has listed, the
// cluster-wide pod watch; waits for the watch to list; and runs the
// workers, the sweep and the resync until ctx is done. It returns a
// *CapacityError, its caches dropped, if the pods to serve exceed
// Options.MaxPods.
func (w *Watcher) Run(ctx context.Context) error {
	logger := logging.FromContext(ctx)
	ctx, refuse := context.WithCancelCause(ctx)
	defer refuse(nil)
	w.refuse = refuse
	defer w.synced.Store(false)
	defer w.queue.ShutDown()
	// Deferred in reverse: cancel the informers and the namespace queues,
	// wait for their goroutines, stop every stray watch, forget the
	// watcher's namespaces and pods.
	defer w.forgetAll()
	defer w.strays.stopAll()
	var informers sync.WaitGroup
	defer informers.Wait()
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	informers.Go(func() { w.nss.RunWithContext(ictx) })
	// The pod watch starts once every namespace's scope is known: the
	// store keeps only pods in scope, and drops any other the watch brings.
	if !cache.WaitForCacheSync(ctx.Done(), w.nss.HasSynced, w.nsSynced) {
		return w.ended(ctx, errors.New("namespace cache did not sync"))
	}
	r := cache.NewReflectorWithOptions(w.lists.Pods("", keys.LabelWatched+"=true"), &corev1.Pod{}, w.labelled,
		cache.ReflectorOptions{Name: "pods", TypeDescription: "*v1.Pod"})
	informers.Go(func() { r.RunWithContext(ictx) })
	informers.Go(func() { w.runCatchUps(ictx) })
	if !cache.WaitForCacheSync(ctx.Done(), w.labelled.synced.Load) {
		return w.ended(ctx, errors.New("pod cache did not sync"))
	}
	informers.Go(func() { w.strays.run(ictx) })
	w.synced.Store(true)
	logger.Infow("Caches synced", zap.Int("namespaces", w.inScope()), zap.Int("pods", w.CachedPods()))
	var wg sync.WaitGroup
	for range w.o.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, w.work, time.Second) })
	}
	wg.Go(func() { w.resyncLoop(ctx) })
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	return w.ended(ctx, nil)
}

// ended is Run's result once ctx is done or the caches could not sync:
// the capacity error if the watcher refused, nothing if it was stopped,
// err otherwise.
func (w *Watcher) ended(ctx context.Context, err error) error {
	var ce *CapacityError
	if errors.As(context.Cause(ctx), &ce) {
		return ce
	}
	if ctx.Err() != nil {
		return nil //nolint:nilerr // a watch ended by its context is a clean stop, whatever it reported
	}
	return err
}

// forgetAll takes the watcher's share out of the gauges once it is over.
func (w *Watcher) forgetAll() {
	w.scopesMu.Lock()
	for ns, s := range w.scopes {
		w.m.WatchedNamespaces.WithLabelValues(s.String()).Dec()
		delete(w.scopes, ns)
	}
	w.scopesMu.Unlock()
	pods, units := w.labelled.size()
	w.counted(-int64(pods), -units)
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

// resyncLoop sweeps at once, then resyncs every cached pod and sweeps each
// resync period (the period read anew after each, or when Reconfigure
// changes it); neither while it is 0.
func (w *Watcher) resyncLoop(ctx context.Context) {
	w.sweep(ctx)
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
			w.sweep(ctx)
		}
	}
}

// resyncAll resyncs every cache.
func (w *Watcher) resyncAll() {
	_ = w.labelled.Resync() // never fails
	for _, s := range w.strays.stores() {
		_ = s.Resync()
	}
}

// onNamespace follows a namespace added, changed or deleted: its scope,
// which setScope acts on when it changes.
func (w *Watcher) onNamespace(op string, obj any) {
	w.m.WatchEvents.WithLabelValues("namespace", op).Inc()
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	s := ScopeNone
	if ns, ok := obj.(*corev1.Namespace); ok && op != "delete" {
		s = ScopeOf(ns.Labels)
	}
	w.setScope(key, s)
}

// setScope records namespace ns's scope. The caches drop the pods a
// narrower scope no longer admits (opted out, no quit); a wider one has the
// namespace's labelled pods listed (catchUp: the cluster-wide watch dropped
// them while the namespace was out of scope; opted in, those that finished
// get their quits), unless the cluster-wide watch has not listed yet (its
// first list reads the scopes in force). The namespace's labelled pods are
// re-queued, and its stray watch reconciled, looking for pods not labelled
// when it comes into scope, those that predate the opt-in (after the first
// list: the sweep looks at the namespaces there at start).
func (w *Watcher) setScope(ns string, s Scope) {
	w.scopesMu.Lock()
	old := w.scopes[ns]
	if old == s {
		w.scopesMu.Unlock()
		return
	}
	if old != ScopeNone {
		w.m.WatchedNamespaces.WithLabelValues(old.String()).Dec()
	}
	if s != ScopeNone {
		w.m.WatchedNamespaces.WithLabelValues(s.String()).Inc()
		w.scopes[ns] = s
	} else {
		delete(w.scopes, ns)
	}
	w.scopesMu.Unlock()
	if synced := w.labelled.rescope(ns); synced && s.widens(old) {
		w.catchUps.Add(ns)
	}
	if store := w.strays.store(ns); store != nil {
		store.rescope(ns)
	}
	if !w.synced.Load() {
		return
	}
	for _, key := range w.labelled.keys(ns) {
		w.queue.Add(key)
	}
	if s != ScopeNone {
		w.strays.lookIn(ns)
	} else {
		w.strays.queue.Add(ns)
	}
}

// scopeOf is namespace ns's scope as setScope last recorded it.
func (w *Watcher) scopeOf(ns string) Scope {
	w.scopesMu.Lock()
	defer w.scopesMu.Unlock()
	return w.scopes[ns]
}

// inScope is the number of namespaces in scope.
func (w *Watcher) inScope() int {
	w.scopesMu.Lock()
	defer w.scopesMu.Unlock()
	return len(w.scopes)
}

// namespaceLabels are namespace ns's labels, false when it is not cached.
func (w *Watcher) namespaceLabels(ns string) (map[string]string, bool) {
	obj, ok, _ := w.nss.GetIndexer().GetByKey(ns)
	if !ok {
		return nil, false
	}
	n, ok := obj.(*corev1.Namespace)
	if !ok {
		return nil, false
	}
	return n.Labels, true
}
