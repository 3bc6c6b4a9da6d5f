package watch

import (
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/pkg/decision"
)

// podStore is one namespace's pod cache, written by that namespace's
// reflector (client-go's list-and-watch loop): it packs each pod, keeps it
// and queues its key for the workers. It is the reflector's store itself,
// not an informer's queue of changes in front of one: a namespace costs its
// reflector's goroutines and the pods it holds, which matters with a
// thousand namespaces opted in (make bench, docs/bench.md).
type podStore struct {
	w      *Watcher
	mu     sync.RWMutex
	pods   map[string]*Packed
	synced atomic.Bool
}

func newPodStore(w *Watcher) *podStore {
	return &podStore{w: w, pods: map[string]*Packed{}}
}

// Transformer has the reflector pack the pods of a streamed first list as
// they arrive, not only once the list is complete.
func (s *podStore) Transformer() cache.TransformFunc { return s.w.transform }

// Add keeps a pod the watch reports added, and queues it.
func (s *podStore) Add(obj any) error { return s.put("add", obj) }

// Update keeps a pod the watch reports changed, and queues it.
func (s *podStore) Update(obj any) error { return s.put("update", obj) }

func (s *podStore) put(op string, obj any) error {
	p, key, err := s.pack(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.pods[key] = p
	s.mu.Unlock()
	s.w.m.WatchEvents.WithLabelValues("pod", op).Inc()
	s.w.queue.Add(key)
	return nil
}

// Delete drops a pod and queues its key: the worker finds it gone and
// forgets what was published for it.
func (s *podStore) Delete(obj any) error {
	if _, ok := obj.(*corev1.Pod); ok {
		s.w.m.PodsDecoded.Inc()
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.pods, key)
	s.mu.Unlock()
	s.w.m.WatchEvents.WithLabelValues("pod", "delete").Inc()
	s.w.queue.Add(key)
	return nil
}

// Replace takes a whole list (the first one, and any relist): every pod in
// it is queued, and so is every pod it no longer has.
func (s *podStore) Replace(list []any, _ string) error {
	pods := make(map[string]*Packed, len(list))
	for _, obj := range list {
		p, key, err := s.pack(obj)
		if err != nil {
			return err
		}
		pods[key] = p
	}
	s.mu.Lock()
	old := s.pods
	s.pods = pods
	s.mu.Unlock()
	for key := range pods {
		s.w.m.WatchEvents.WithLabelValues("pod", "add").Inc()
		s.w.queue.Add(key)
	}
	for key := range old {
		if _, kept := pods[key]; !kept {
			s.w.m.WatchEvents.WithLabelValues("pod", "delete").Inc()
			s.w.queue.Add(key)
		}
	}
	s.synced.Store(true)
	return nil
}

// Resync is the watcher's periodic call (Options.Resync, resyncLoop), and
// its call on a change of the decision's options (Reconfigure): pods still
// deciding Quit are published again (past the dedup window this reaches
// the function anew), which retries a quit lost downstream. Others are
// left alone.
func (s *podStore) Resync() error {
	s.mu.RLock()
	quit := make([]string, 0, 8)
	for key, p := range s.pods {
		if decision.Decide(p.Unpack(), s.w.options()).Outcome == decision.Quit {
			quit = append(quit, key)
		}
	}
	n := len(s.pods)
	s.mu.RUnlock()
	s.w.m.WatchEvents.WithLabelValues("pod", "resync").Add(float64(n))
	for _, key := range quit {
		s.w.published.forget(key)
		s.w.queue.Add(key)
	}
	return nil
}

func (s *podStore) get(key string) (*Packed, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.pods[key]
	return p, ok
}

func (s *podStore) keys() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.pods))
	for key := range s.pods {
		out = append(out, key)
	}
	return out
}

func (s *podStore) len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.pods)
}

// pack is the transform applied once (a pod a streamed list delivered
// comes packed already), with the pod's key.
func (s *podStore) pack(obj any) (*Packed, string, error) {
	o, err := s.w.transform(obj)
	if err != nil {
		return nil, "", err
	}
	p, ok := o.(*Packed)
	if !ok {
		return nil, "", fmt.Errorf("a pod watch delivered a %T", obj)
	}
	key, err := cache.MetaNamespaceKeyFunc(p)
	return p, key, err
}
