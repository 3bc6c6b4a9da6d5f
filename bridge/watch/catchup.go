package watch

import (
	"context"
	"strings"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// catching is a catch-up under way in one namespace: the names the
// cluster-wide watch removed since it began (deleted, or no longer
// selected or admitted), and whether a relist has replaced the store
// meanwhile.
type catching struct {
	removed map[string]struct{}
	stale   bool
}

// runCatchUps lists, namespace by namespace, the labelled pods of the
// namespaces whose scope widened, until ctx is done. One goroutine: a
// namespace is never caught up twice at once.
func (w *Watcher) runCatchUps(ctx context.Context) {
	go func() { <-ctx.Done(); w.catchUps.ShutDown() }()
	for {
		ns, quit := w.catchUps.Get()
		if quit {
			return
		}
		if err := w.labelled.catchUp(ctx, ns); err != nil && ctx.Err() == nil {
			logging.FromContext(ctx).Warnw("Listing the labelled pods of a namespace that came into scope; trying again",
				zap.String("namespace", ns), zap.Error(err))
			w.catchUps.AddRateLimited(ns)
		} else {
			w.catchUps.Forget(ns)
		}
		w.catchUps.Done(ns)
	}
}

// catchUp brings into the store the labelled pods of namespace ns that the
// cluster-wide watch dropped while ns was out of scope (or admitted fewer
// of its pods): one paged list of them. A listed pod is kept only if the
// watch has not brought it meanwhile (its state is newer), has not seen it
// go since the catch-up began (the list may be older than that), and the
// scope in force admits it; a relist meanwhile read the new scope, and
// ends the catch-up.
func (s *podStore) catchUp(ctx context.Context, ns string) error {
	c, end := s.beginCatchUp(ns)
	defer end()
	lw := cache.ToListerWatcherWithContext(s.w.lists.Pods(ns, keys.LabelWatched+"=true"))
	p := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return lw.ListWithContext(ctx, o)
	})
	return p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		return s.caught(c, obj)
	})
}

// beginCatchUp has the store note, until end, what its watch removes from
// namespace ns.
func (s *podStore) beginCatchUp(ns string) (c *catching, end func()) {
	c = &catching{removed: map[string]struct{}{}}
	s.mu.Lock()
	s.catching[ns] = c
	s.mu.Unlock()
	return c, func() {
		s.mu.Lock()
		delete(s.catching, ns)
		s.mu.Unlock()
	}
}

// caught keeps one pod a catch-up listed, if it may.
func (s *podStore) caught(c *catching, obj runtime.Object) error {
	p, key, err := s.pack(obj)
	if err != nil || p == nil {
		return err
	}
	ns, name, _ := strings.Cut(key, "/")
	s.mu.Lock()
	_, removed := c.removed[name]
	_, present := s.pods[ns][name]
	kept := !c.stale && !removed && !present && s.admits(p)
	if kept {
		s.keep(p)
	}
	s.mu.Unlock()
	if kept {
		s.w.counted(1, int64(p.Units()))
		s.w.m.WatchEvents.WithLabelValues("pod", "add").Inc()
		s.w.queue.Add(key)
	}
	return nil
}
