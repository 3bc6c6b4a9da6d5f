// Package testenv starts real components for the bridge's tests: an
// embedded nats-server with JetStream on a free loopback port and a store in
// t.TempDir(), and connections that reconnect quickly.
package testenv

import (
	"context"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/bridge/watch"
)

// Server is a restartable embedded nats-server.
type Server struct {
	t    testing.TB
	Dir  string
	Port int
	*transport.Embedded
}

// StartServer starts a server on a free port with its store in a new
// temporary directory. It is shut down when the test ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, Dir: t.TempDir(), Port: -1}
	s.Start()
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if s.Port, err = strconv.Atoi(u.Port()); err != nil {
		t.Fatal(err)
	}
	return s
}

// Start (re)starts the server on the same port and store.
func (s *Server) Start() {
	s.t.Helper()
	e, err := transport.StartEmbedded(transport.EmbeddedOptions{StoreDir: s.Dir, Port: s.Port})
	if err != nil {
		s.t.Fatal(err)
	}
	s.Embedded = e
	s.t.Cleanup(e.Shutdown)
}

// Connect returns a connection that keeps reconnecting every 20ms.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectJitter(0, 0), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Context is a test-scoped context carrying a test logger.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(logging.WithLogger(context.Background(), zaptest.NewLogger(t).Sugar()))
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 5ms until it holds or the deadline passes.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Lists are a clientset's (usually a fake's) list-watches, as production
// builds them (watch.KubeLists): pods with the field selector given and the
// watcher's label selector, and their metadata for the sweep (whole pods
// listed and cut down: a fake has no metadata-only lists). They carry the
// clientset's word on whether it can stream the initial list (a fake
// cannot), as informer factories do. A fake applies label selectors to
// lists only: Lists applies them to watch events too, as the API server
// does. Watching says which namespaces' pod watches are open, so that a
// test changes pods only once a watch can see the change (a fake replays
// nothing from before a watch started).
type Lists struct {
	watch.Lists
	mu     sync.Mutex
	open   map[string]int
	sweeps int
}

// NewLists returns cs's lists, pods with podFieldSelector.
func NewLists(cs kubernetes.Interface, podFieldSelector string) *Lists {
	l := &Lists{open: map[string]int{}}
	l.Namespaces = cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().Namespaces().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
			return cs.CoreV1().Namespaces().Watch(ctx, o)
		},
	}, cs)
	l.Pods = func(namespace, labelSelector string) cache.ListerWatcher {
		tweak := func(o *metav1.ListOptions) { o.FieldSelector, o.LabelSelector = podFieldSelector, labelSelector }
		return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				tweak(&o)
				return cs.CoreV1().Pods(namespace).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
				tweak(&o)
				sel, err := labels.Parse(o.LabelSelector)
				if err != nil {
					return nil, err
				}
				w, err := cs.CoreV1().Pods(namespace).Watch(ctx, o)
				if err != nil {
					return nil, err
				}
				l.opened(namespace, 1)
				return &tracked{Interface: selected(w, sel), stop: func() { l.opened(namespace, -1) }}, nil
			},
		}, cs)
	}
	l.Strays = func(ctx context.Context, labelSelector string, each func(*metav1.PartialObjectMetadata)) error {
		l.mu.Lock()
		l.sweeps++
		l.mu.Unlock()
		list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: podFieldSelector, LabelSelector: labelSelector})
		if err != nil {
			return err
		}
		for i := range list.Items {
			p := &list.Items[i]
			each(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}, ObjectMeta: p.ObjectMeta})
		}
		return nil
	}
	return l
}

// Sweeps is how many times the watcher listed pods' metadata.
func (l *Lists) Sweeps() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sweeps
}

// Watching reports whether a pod watch of namespace ("": the cluster-wide
// one) is open.
func (l *Lists) Watching(namespace string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[namespace] > 0
}

func (l *Lists) opened(namespace string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open[namespace] += n
}

// selected passes the events of objects sel matches, as the API server
// does for a label-selected watch: an object that stops matching arrives
// deleted, one that never matched not at all.
func selected(w apiwatch.Interface, sel labels.Selector) apiwatch.Interface {
	if sel.Empty() {
		return w
	}
	seen := map[string]bool{}
	return apiwatch.Filter(w, func(e apiwatch.Event) (apiwatch.Event, bool) {
		m, err := meta.Accessor(e.Object)
		if err != nil || (e.Type != apiwatch.Added && e.Type != apiwatch.Modified && e.Type != apiwatch.Deleted) {
			return e, true
		}
		key := m.GetNamespace() + "/" + m.GetName()
		was := seen[key]
		now := e.Type != apiwatch.Deleted && sel.Matches(labels.Set(m.GetLabels()))
		seen[key] = now
		switch {
		case now && !was:
			return apiwatch.Event{Type: apiwatch.Added, Object: e.Object}, true
		case !now && was:
			return apiwatch.Event{Type: apiwatch.Deleted, Object: e.Object}, true
		}
		return e, now
	})
}

// tracked calls stop once when the watch is stopped.
type tracked struct {
	apiwatch.Interface
	once sync.Once
	stop func()
}

func (t *tracked) Stop() {
	t.once.Do(t.stop)
	t.Interface.Stop()
}
