package watch

import (
	"context"
	"sync"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"knative.dev/pkg/logging"
)

// strayWatches watch, namespace by namespace, the opted-in pods that lack
// the webhook's label (keys.LabelWatched) and so never reach the
// cluster-wide watch: pods created before their namespace opted in, before
// istio-aux was installed, or while the webhook was not called. A
// namespace's watch opens when it is asked to look there (its namespace
// opted in, or the sweep found such pods in it) and closes once it holds
// none that is opted in: in a cluster whose pods all went through the webhook, no
// per-namespace watch is open. A queue of namespace names drives them,
// level-triggered: each name is reconciled against the namespace cache,
// whatever the event was. Only one goroutine at a time reconciles (run),
// so a watch is never started twice.
type strayWatches struct {
	w     *Watcher
	queue *workqueue.Typed[string]
	mu    sync.RWMutex
	byNS  map[string]*podWatch
	// look holds the namespaces to look in: a watch is opened there even
	// if none is open.
	look sync.Map
}

// podWatch is one namespace's watch of its pods not labelled: a
// client-go reflector writing into a podStore.
type podWatch struct {
	scope  Scope
	store  *podStore
	cancel context.CancelFunc
	done   chan struct{}
}

func newStrayWatches(w *Watcher) *strayWatches {
	return &strayWatches{
		w:     w,
		queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "istio-aux-strays"}),
		byNS:  map[string]*podWatch{},
	}
}

// lookIn has namespace ns's pods not labelled listed and watched, if
// it is in scope, until it holds none.
func (p *strayWatches) lookIn(ns string) {
	p.look.Store(ns, struct{}{})
	p.queue.Add(ns)
}

// run reconciles queued namespaces until ctx is done.
func (p *strayWatches) run(ctx context.Context) {
	go func() { <-ctx.Done(); p.queue.ShutDown() }()
	for {
		name, quit := p.queue.Get()
		if quit {
			return
		}
		p.reconcile(ctx, name)
		p.queue.Done(name)
	}
}

// reconcile gives namespace name the watch its scope and its pods call
// for: none out of scope; none once a synced watch holds no opted-in pod
// (unless asked to look again: a pod opted out by its annotation keeps no
// watch open); a new one when asked to look.
func (p *strayWatches) reconcile(ctx context.Context, name string) {
	nsLabels, _ := p.w.namespaceLabels(name)
	want := ScopeOf(nsLabels)
	_, look := p.look.LoadAndDelete(name)
	cur := p.get(name)
	if cur != nil && (cur.scope != want || (!look && cur.store.synced.Load() && !cur.store.servesAny(nsLabels))) {
		p.stop(ctx, name, cur)
		cur = nil
	}
	if cur == nil && look && want != ScopeNone && ctx.Err() == nil {
		p.start(ctx, name, want)
	}
}

func (p *strayWatches) start(ctx context.Context, ns string, s Scope) {
	w := p.w
	store := newPodStore(w, false)
	store.shrunk = func() { p.queue.Add(ns) }
	r := cache.NewReflectorWithOptions(w.lists.Pods(ns, s.StraySelector()), &corev1.Pod{}, store,
		cache.ReflectorOptions{Name: "strays/" + ns, TypeDescription: "*v1.Pod"})
	wctx, cancel := context.WithCancel(ctx)
	pw := &podWatch{scope: s, store: store, cancel: cancel, done: make(chan struct{})}
	p.mu.Lock()
	p.byNS[ns] = pw
	p.mu.Unlock()
	go func() {
		defer close(pw.done)
		r.RunWithContext(wctx)
	}()
	w.m.StrayWatches.Inc()
	logging.FromContext(ctx).Infow("Watching pods not labelled by the webhook", zap.String("namespace", ns), zap.Stringer("scope", s))
}

// stop ends a namespace's watch and drops its cache. Its pods' keys go
// through the pod queue once more: each reads as gone (unless the
// cluster-wide watch has it now), so what was published for it and any
// back-off are forgotten, and a namespace opted in again later gets its
// quits anew.
func (p *strayWatches) stop(ctx context.Context, ns string, pw *podWatch) {
	p.mu.Lock()
	delete(p.byNS, ns)
	p.mu.Unlock()
	keys := p.halt(pw)
	for _, key := range keys {
		p.w.queue.Add(key)
	}
	logging.FromContext(ctx).Infow("Stopped watching pods not labelled by the webhook", zap.String("namespace", ns), zap.Int("dropped", len(keys)))
}

// stopAll ends every watch once the context they run under is done, and
// waits for each: the watcher is over (its replica lost the Lease, or
// stops).
func (p *strayWatches) stopAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ns, pw := range p.byNS {
		p.halt(pw)
		delete(p.byNS, ns)
	}
}

// halt ends one watch, waits for it, and takes its pods out of the counts;
// it returns their keys.
func (p *strayWatches) halt(pw *podWatch) []string {
	pw.cancel()
	<-pw.done
	p.w.m.StrayWatches.Dec()
	keys := pw.store.allKeys()
	_, units := pw.store.size()
	p.w.counted(-int64(len(keys)), -units)
	return keys
}

func (p *strayWatches) get(ns string) *podWatch {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.byNS[ns]
}

// store is namespace ns's cache of pods not labelled, nil when none
// is watched.
func (p *strayWatches) store(ns string) *podStore {
	if pw := p.get(ns); pw != nil {
		return pw.store
	}
	return nil
}

// stores are the caches of the namespaces watched now.
func (p *strayWatches) stores() []*podStore {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]*podStore, 0, len(p.byNS))
	for _, pw := range p.byNS {
		out = append(out, pw.store)
	}
	return out
}
