package watch

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// podStore is a pod cache written by one client-go reflector (the
// list-and-watch loop): the cluster-wide watch of the pods labelled
// keys.LabelWatched=true, or one namespace's watch of the others
// (strays.go). It packs each pod, keeps it and queues its key for the
// workers. It is the reflector's store itself, not an informer's queue of
// changes in front of one. Pods are held by namespace, so that a namespace
// whose scope changes re-queues its own pods only.
//
// It holds only the pods its watcher serves: in a namespace in scope, and
// admitted by that scope (Scope.Admits), whatever else a watch brings. A
// label selector cannot read a namespace's labels, so the cluster-wide
// watch brings every pod labelled keys.LabelWatched=true, anyone's: one
// outside the scope is decoded (the API server sends it) and dropped at
// once, before it is packed, counted or queued. Its namespace coming into
// scope later lists it (catchup.go).
type podStore struct {
	w *Watcher
	// labelled: this store holds the pods labelled keys.LabelWatched=true
	// (the cluster-wide watch's); otherwise those that are not (a
	// namespace's stray watch).
	labelled bool
	mu       sync.RWMutex
	pods     map[string]map[string]*Packed // namespace -> name -> pod
	n        int
	// units is what the pods count against the capacity (Packed.Units).
	units int64
	// synced is set, under mu, by the first Replace.
	synced atomic.Bool
	// listing counts the pods of the first list packed so far, before
	// Replace takes them: the capacity is checked as they arrive.
	listing atomic.Int64
	// shrunk, if set, is called when a synced store lost pods (a delete, a
	// list).
	shrunk func()
	// catching holds, by namespace, the catch-up under way there
	// (catchup.go).
	catching map[string]*catching
}

func newPodStore(w *Watcher, labelled bool) *podStore {
	return &podStore{w: w, labelled: labelled, pods: map[string]map[string]*Packed{}, catching: map[string]*catching{}}
}

// wants reports whether the store holds a pod with these labels in
// namespace ns: its own watch's selection (keys.LabelWatched=true or not;
// the API server applies it, this makes sure), and the namespace's scope.
func (s *podStore) wants(ns string, labels map[string]string) bool {
	return (labels[keys.LabelWatched] == "true") == s.labelled && s.w.scopeOf(ns).Admits(labels)
}

// admits reports whether the scope of p's namespace admits it now. Called
// under mu, so that a change of scope (rescope) and a pod's arrival are
// ordered.
func (s *podStore) admits(p *Packed) bool {
	return p.admittedBy(s.w.scopeOf(p.Namespace()))
}

// outside stands for a pod the store does not hold: what its transform
// makes of it, so that a streamed first list keeps only its key until the
// list is replaced.
type outside struct{ namespace, name string }

func (o *outside) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: o.namespace, Name: o.name}
}
func (o *outside) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (o *outside) DeepCopyObject() runtime.Object   { c := *o; return &c }

// transform packs a pod the store holds and counts it as decoded: every
// pod a watch receives from the API server passes here once (a streamed
// list's pods come back to Replace already transformed, a tombstone's pod
// packed). A pod the store does not hold becomes an outside, unpacked.
func (s *podStore) transform(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return PackTransform(obj)
	}
	s.w.m.PodsDecoded.Inc()
	if !s.wants(pod.Namespace, pod.Labels) {
		return &outside{namespace: pod.Namespace, name: pod.Name}, nil
	}
	return Pack(slim.Of(pod)), nil
}

// Transformer has the reflector pack the pods of a streamed first list as
// they arrive, not only once the list is complete, and count those it
// holds against the capacity.
func (s *podStore) Transformer() cache.TransformFunc {
	return func(obj any) (any, error) {
		out, err := s.transform(obj)
		if p, ok := out.(*Packed); ok && !s.synced.Load() {
			s.w.checkCapacity(s.listing.Add(int64(p.Units())))
		}
		return out, err
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
	ns, name, _ := strings.Cut(key, "/")
	s.mu.Lock()
	held := p != nil && s.admits(p)
	var old *Packed
	if held {
		old = s.keep(p)
	} else {
		old = s.remove(ns, name)
	}
	s.mu.Unlock()
	switch {
	case held:
		if old == nil {
			s.w.counted(1, int64(p.Units()))
		} else if d := p.Units() - old.Units(); d != 0 {
			s.w.counted(0, int64(d))
		}
		s.w.m.WatchEvents.WithLabelValues("pod", op).Inc()
		s.w.queue.Add(key)
	case old != nil:
		// It left the store's selection or its namespace's scope: gone.
		s.dropped(key, old)
	}
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
	old := s.remove(ns, name)
	s.mu.Unlock()
	if old != nil {
		s.dropped(key, old)
	}
	return nil
}

// keep puts p into the store, under mu, and returns the pod it replaced.
func (s *podStore) keep(p *Packed) (old *Packed) {
	old = keep(s.pods, p)
	s.units += int64(p.Units())
	if old == nil {
		s.n++
	} else {
		s.units -= int64(old.Units())
	}
	return old
}

// remove takes a pod out of the store, under mu, and returns it (nil if it
// was not there). A catch-up under way in its namespace learns that the watch
// saw it go (or leave the store's selection), so as not to bring back the
// state it listed before.
func (s *podStore) remove(ns, name string) *Packed {
	if c := s.catching[ns]; c != nil {
		c.removed[name] = struct{}{}
	}
	old, had := s.pods[ns][name]
	if !had {
		return nil
	}
	delete(s.pods[ns], name)
	if len(s.pods[ns]) == 0 {
		delete(s.pods, ns)
	}
	s.n--
	s.units -= int64(old.Units())
	return old
}

// dropped counts a pod taken out and queues its key: the worker reads it
// as gone.
func (s *podStore) dropped(key string, p *Packed) {
	s.w.counted(-1, -int64(p.Units()))
	s.w.m.WatchEvents.WithLabelValues("pod", "delete").Inc()
	s.w.queue.Add(key)
	s.hasShrunk()
}

// Replace takes a whole list (the first one, and any relist): every pod in
// it that the store holds is queued, and so is every pod it no longer has.
func (s *podStore) Replace(list []any, _ string) error {
	packed := make([]*Packed, 0, len(list))
	for _, obj := range list {
		p, _, err := s.pack(obj)
		if err != nil {
			return err
		}
		if p != nil {
			packed = append(packed, p)
		}
	}
	pods := make(map[string]map[string]*Packed)
	keys := make([]string, 0, len(packed))
	var units int64
	s.mu.Lock()
	for _, p := range packed {
		if s.admits(p) {
			// A list names a pod once; were it twice, the later would win.
			if old := keep(pods, p); old != nil {
				units -= int64(old.Units())
			} else {
				keys = append(keys, p.Namespace()+"/"+p.Name())
			}
			units += int64(p.Units())
		}
	}
	old, oldN, oldUnits := s.pods, s.n, s.units
	s.pods, s.n, s.units = pods, len(keys), units
	// The list was taken under the scopes in force now: it covers every
	// namespace a catch-up is bringing in.
	for _, c := range s.catching {
		c.stale = true
	}
	s.synced.Store(true)
	s.mu.Unlock()
	s.listing.Store(0)
	s.w.counted(int64(len(keys)-oldN), units-oldUnits)
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
	s.hasShrunk()
	return nil
}

// rescope follows a change of namespace ns's scope: the pods the new scope
// does not admit are dropped and queued (the worker reads them as gone: no
// quit, and what was published for them is forgotten). It reports whether
// the store has synced (its first list came before this change of scope):
// only then must a wider scope have its namespace's pods listed, as the
// watch dropped those it brought while the scope did not admit them.
func (s *podStore) rescope(ns string) (synced bool) {
	var gone []*Packed
	s.mu.Lock()
	for name, p := range s.pods[ns] {
		if !s.admits(p) {
			gone = append(gone, s.remove(ns, name))
		}
	}
	synced = s.synced.Load()
	s.mu.Unlock()
	for _, p := range gone {
		s.dropped(ns+"/"+p.Name(), p)
	}
	return synced
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
// its call on a change of the decision's options (Reconfigure): pods whose
// decision still acts (Quit, Replace) are published again (past the dedup
// window this reaches the function anew), which retries a quit lost
// downstream. Others are left alone.
func (s *podStore) Resync() error {
	o := s.w.options()
	s.mu.RLock()
	quit := make([]string, 0, 8)
	for ns, names := range s.pods {
		for name, p := range names {
			if decision.DecideForAnyKubelet(p.Unpack(), o).Outcome.Acts() {
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

// keep puts p into pods (namespace -> name -> pod) and returns the pod of
// the same key it replaced, if any.
func keep(pods map[string]map[string]*Packed, p *Packed) (old *Packed) {
	names := pods[p.Namespace()]
	if names == nil {
		names = map[string]*Packed{}
		pods[p.Namespace()] = names
	}
	old = names[p.Name()]
	names[p.Name()] = p
	return old
}

// size is how many pods the store holds, and what they count against the
// capacity.
func (s *podStore) size() (pods int, units int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.n, s.units
}

// pack is the transform applied once (a pod a streamed list delivered
// comes transformed already), with the pod's key. A pod the store does not
// hold packs to nil.
func (s *podStore) pack(obj any) (*Packed, string, error) {
	o, err := s.transform(obj)
	if err != nil {
		return nil, "", err
	}
	switch p := o.(type) {
	case *Packed:
		return p, p.Namespace() + "/" + p.Name(), nil
	case *outside:
		return nil, p.namespace + "/" + p.name, nil
	}
	return nil, "", fmt.Errorf("a pod watch delivered a %T", obj)
}
