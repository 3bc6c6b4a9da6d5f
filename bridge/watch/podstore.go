package watch

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/pkg/decision"
)

// podStore is a pod cache written by one client-go reflector (the
// list-and-watch loop): the cluster-wide watch of labelled pods, or one
// namespace's watch of pods without the label (strays.go). It packs each
// pod, keeps it and queues its key for the workers. It is the reflector's
// store itself, not an informer's queue of changes in front of one. Pods are
// held by namespace, so that a namespace whose scope changes re-queues its
// own pods only.
type podStore struct {
	w      *Watcher
	mu     sync.RWMutex
	pods   map[string]map[string]*Packed // namespace -> name -> pod
	n      int
	synced atomic.Bool
	// listing counts the pods of the first list packed so far, before
	// Replace takes them: the capacity is checked as they arrive.
	listing atomic.Int64
	// shrunk, if set, is called when a synced store lost pods (a delete, a
	// list).
	shrunk func()
}

func newPodStore(w *Watcher) *podStore {
	return &podStore{w: w, pods: map[string]map[string]*Packed{}}
}

// Transformer has the reflector pack the pods of a streamed first list as
// they arrive, not only once the list is complete, and count them against
// the capacity.
func (s *podStore) Transformer() cache.TransformFunc {
	return func(obj any) (any, error) {
		if _, ok := obj.(*corev1.Pod); ok && !s.synced.Load() {
			s.w.checkCapacity(s.listing.Add(1))
		}
		return s.w.transform(obj)
	}
}

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
	had := keep(s.pods, p)
	if !had {
		s.n++
	}
	s.mu.Unlock()
	if !had {
		s.w.counted(1)
	}
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
	ns, name, _ := strings.Cut(key, "/")
	s.mu.Lock()
	_, had := s.pods[ns][name]
	if had {
		delete(s.pods[ns], name)
		if len(s.pods[ns]) == 0 {
			delete(s.pods, ns)
		}
		s.n--
	}
	s.mu.Unlock()
	if had {
		s.w.counted(-1)
	}
	s.w.m.WatchEvents.WithLabelValues("pod", "delete").Inc()
	s.w.queue.Add(key)
	s.hasShrunk()
	return nil
}

// Replace takes a whole list (the first one, and any relist): every pod in
// it is queued, and so is every pod it no longer has.
func (s *podStore) Replace(list []any, _ string) error {
	pods := make(map[string]map[string]*Packed)
	keys := make([]string, 0, len(list))
	for _, obj := range list {
		p, key, err := s.pack(obj)
		if err != nil {
			return err
		}
		keep(pods, p)
		keys = append(keys, key)
	}
	s.mu.Lock()
	old, oldN := s.pods, s.n
	s.pods, s.n = pods, len(keys)
	s.mu.Unlock()
	s.listing.Store(0)
	s.w.counted(int64(len(keys) - oldN))
	for _, key := range keys {
		s.w.m.WatchEvents.WithLabelValues("pod", "add").Inc()
		s.w.queue.Add(key)
	}
	for ns, names := range old {
		for name := range names {
			if _, kept := pods[ns][name]; !kept {
				s.w.m.WatchEvents.WithLabelValues("pod", "delete").Inc()
				s.w.queue.Add(ns + "/" + name)
			}
		}
	}
	s.synced.Store(true)
	s.hasShrunk()
	return nil
}

func (s *podStore) hasShrunk() {
	if s.shrunk != nil && s.synced.Load() {
		s.shrunk()
	}
}

// servesAny reports whether the watcher serves any pod of the store, in a
// namespace with these labels (Serves).
func (s *podStore) servesAny(nsLabels map[string]string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, names := range s.pods {
		for _, p := range names {
			if pod := p.Unpack(); Serves(nsLabels, pod.Labels, pod.Annotations) {
				return true
			}
		}
	}
	return false
}

// Resync is the watcher's periodic call (Options.Resync, resyncLoop), and
// its call on a change of the decision's options (Reconfigure): pods still
// deciding Quit are published again (past the dedup window this reaches
// the function anew), which retries a quit lost downstream. Others are
// left alone.
func (s *podStore) Resync() error {
	o := s.w.options()
	s.mu.RLock()
	quit := make([]string, 0, 8)
	for ns, names := range s.pods {
		for name, p := range names {
			if decision.DecideForAnyKubelet(p.Unpack(), o).Outcome == decision.Quit {
				quit = append(quit, ns+"/"+name)
			}
		}
	}
	n := s.n
	s.mu.RUnlock()
	s.w.m.WatchEvents.WithLabelValues("pod", "resync").Add(float64(n))
	for _, key := range quit {
		s.w.published.forget(key)
		s.w.queue.Add(key)
	}
	return nil
}

func (s *podStore) get(key string) (*Packed, bool) {
	ns, name, _ := strings.Cut(key, "/")
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.pods[ns][name]
	return p, ok
}

// keys are the keys of the pods of namespace ns.
func (s *podStore) keys(ns string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.pods[ns]))
	for name := range s.pods[ns] {
		out = append(out, ns+"/"+name)
	}
	return out
}

// allKeys are the keys of every pod.
func (s *podStore) allKeys() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, s.n)
	for ns, names := range s.pods {
		for name := range names {
			out = append(out, ns+"/"+name)
		}
	}
	return out
}

// keep puts p into pods (namespace -> name -> pod) and reports whether it
// replaced a pod of the same key.
func keep(pods map[string]map[string]*Packed, p *Packed) (had bool) {
	names := pods[p.Namespace()]
	if names == nil {
		names = map[string]*Packed{}
		pods[p.Namespace()] = names
	}
	_, had = names[p.Name()]
	names[p.Name()] = p
	return had
}

func (s *podStore) len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.n
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
	return p, p.Namespace() + "/" + p.Name(), nil
}
