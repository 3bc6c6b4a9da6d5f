// Package testenv starts real components for the bridge's tests: an
// embedded nats-server with JetStream on a free loopback port and a store in
// t.TempDir(), and connections that reconnect quickly.
package testenv

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// Lists are a clientset's (usually a fake's) pod and namespace list-watches,
// as production builds them from internal/kube: pods with the watcher's
// field selector. They carry the clientset's word on whether it can stream
// the initial list (a fake cannot), as informer factories do.
func Lists(cs kubernetes.Interface, podFieldSelector string) watch.Lists {
	tweak := func(o *metav1.ListOptions) { o.FieldSelector = podFieldSelector }
	return watch.Lists{
		Pods: cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				tweak(&o)
				return cs.CoreV1().Pods("").List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
				tweak(&o)
				return cs.CoreV1().Pods("").Watch(ctx, o)
			},
		}, cs),
		Namespaces: cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return cs.CoreV1().Namespaces().List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
				return cs.CoreV1().Namespaces().Watch(ctx, o)
			},
		}, cs),
	}
}
