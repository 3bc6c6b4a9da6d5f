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

// podWatches holds one pod watch per namespace in scope. A queue of
// namespace names drives them, level-triggered: each name is reconciled
// against the namespace cache, whatever the event was, so a label flipped
// back and forth, or a namespace deleted and re-created, ends in the right
// watch. Only one goroutine at a time reconciles (Run's start-up pass, then
// run), so a watch is never started twice.
type podWatches struct {
	w     *Watcher
	queue *workqueue.Typed[string]
	mu    sync.RWMutex
	byNS  map[string]*podWatch
}

// podWatch is one namespace's pod watch: a client-go reflector writing
// into a podStore (the slim transform, the queue, the resync).
type podWatch struct {
	scope  Scope
	store  *podStore
	cancel context.CancelFunc
	done   chan struct{}
}

func newPodWatches(w *Watcher) *podWatches {
	return &podWatches{
		w:     w,
		queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "istio-aux-namespaces"}),
		byNS:  map[string]*podWatch{},
	}
}

// run reconciles queued namespaces until ctx is done.
func (p *podWatches) run(ctx context.Context) {
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

// reconcile gives namespace name the watch its labels call for, stopping
// the one it had if that differs.
func (p *podWatches) reconcile(ctx context.Context, name string) {
	want := ScopeNone
	if obj, ok, _ := p.w.nss.GetStore().GetByKey(name); ok {
		if ns, ok := obj.(*corev1.Namespace); ok {
			want = ScopeOf(ns.Labels)
		}
	}
	cur := p.get(name)
	if cur != nil && cur.scope == want {
		return
	}
	if cur != nil {
		p.stop(ctx, name, cur)
	}
	if want != ScopeNone && ctx.Err() == nil {
		p.start(ctx, name, want)
	}
}

func (p *podWatches) start(ctx context.Context, ns string, s Scope) {
	w := p.w
	store := newPodStore(w)
	r := cache.NewReflectorWithOptions(w.lists.Pods(ns, s.LabelSelector()), &corev1.Pod{}, store,
		cache.ReflectorOptions{Name: "pods/" + ns, TypeDescription: "*v1.Pod"})
	wctx, cancel := context.WithCancel(ctx)
	pw := &podWatch{scope: s, store: store, cancel: cancel, done: make(chan struct{})}
	p.mu.Lock()
	p.byNS[ns] = pw
	p.mu.Unlock()
	go func() {
		defer close(pw.done)
		r.RunWithContext(wctx)
	}()
	w.m.WatchedNamespaces.WithLabelValues(s.String()).Inc()
	logging.FromContext(ctx).Infow("Watching pods", zap.String("namespace", ns), zap.Stringer("scope", s))
}

// stop ends a namespace's watch and drops its cache. Its pods' keys go
// through the pod queue once more: each reads as gone, so what was
// published for it and any back-off are forgotten, and a namespace opted
// in again later gets its quits anew.
func (p *podWatches) stop(ctx context.Context, ns string, pw *podWatch) {
	p.mu.Lock()
	delete(p.byNS, ns)
	p.mu.Unlock()
	pw.cancel()
	<-pw.done
	p.w.m.WatchedNamespaces.WithLabelValues(pw.scope.String()).Dec()
	keys := pw.store.keys()
	for _, key := range keys {
		p.w.queue.Add(key)
	}
	logging.FromContext(ctx).Infow("Stopped watching pods", zap.String("namespace", ns), zap.Int("dropped", len(keys)))
}

// stopAll ends every watch once the context they run under is done, and
// waits for each: the watcher is over (its replica lost the Lease, or
// stops), and no namespace is watched any more.
func (p *podWatches) stopAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ns, pw := range p.byNS {
		pw.cancel()
		<-pw.done
		p.w.m.WatchedNamespaces.WithLabelValues(pw.scope.String()).Dec()
		delete(p.byNS, ns)
	}
}

func (p *podWatches) get(ns string) *podWatch {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.byNS[ns]
}

// store is namespace ns's pod cache, nil when its pods are not watched.
func (p *podWatches) store(ns string) *podStore {
	if pw := p.get(ns); pw != nil {
		return pw.store
	}
	return nil
}

// hasSynced reports whether every watch has listed its pods.
func (p *podWatches) hasSynced() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, pw := range p.byNS {
		if !pw.store.synced.Load() {
			return false
		}
	}
	return true
}

// stores are the caches of the namespaces watched now.
func (p *podWatches) stores() []*podStore {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]*podStore, 0, len(p.byNS))
	for _, pw := range p.byNS {
		out = append(out, pw.store)
	}
	return out
}

func (p *podWatches) count() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.byNS)
}

func (p *podWatches) cached() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	n := 0
	for _, pw := range p.byNS {
		n += pw.store.len()
	}
	return n
}
