//go:build e2e

package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/bridge/watch"
)

// The previous bridge's watch client (bridge/app's watchClient): protobuf,
// at 100 requests a second with bursts of 200, its watches included.
const (
	perNamespaceQPS   = 100
	perNamespaceBurst = 200
)

// perNamespaceDeadline bounds the opening of perNamespaceWatches: past it
// the arm is skipped (docs/bench.md).
const perNamespaceDeadline = 5 * time.Minute

// perNamespaceWatches stands in for the previous bridge's pod requests,
// the design it had before its one cluster-wide watch: one client-go
// reflector per namespace, listing and watching that namespace's pods with
// watch.PodFieldSelector, protobuf, through one client at the previous
// bridge's rate limit. The reflector is client-go's (v0.35: its first list
// is a streamed watch, sendInitialEvents), as the previous bridge's was, so
// the API server sees the same lists and watches. It does not stand in for
// that bridge's memory or CPU: the pods are counted and dropped.
type perNamespaceWatches struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	synced atomic.Int64 // reflectors whose first list is in
}

// openPerNamespaceWatches starts one reflector per namespace in names on
// the cluster rc points at; close stops them.
func openPerNamespaceWatches(rc *rest.Config, names []string) (*perNamespaceWatches, error) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = perNamespaceQPS, perNamespaceBurst
	// As internal/kube's NewForConfig.
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &perNamespaceWatches{cancel: cancel}
	for _, ns := range names {
		pods := cs.CoreV1().Pods(ns)
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = watch.PodFieldSelector
				return pods.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
				o.FieldSelector = watch.PodFieldSelector
				return pods.Watch(ctx, o)
			},
		}
		r := cache.NewReflectorWithOptions(lw, &corev1.Pod{}, &countingStore{synced: &w.synced},
			cache.ReflectorOptions{Name: "pods/" + ns, TypeDescription: "*v1.Pod"})
		w.wg.Go(func() { r.RunWithContext(ctx) })
	}
	return w, nil
}

// listed is how many reflectors have their first list in.
func (w *perNamespaceWatches) listed() int { return int(w.synced.Load()) }

// close ends every watch and waits for the reflectors to return.
func (w *perNamespaceWatches) close() {
	w.cancel()
	w.wg.Wait()
}

// countingStore is a reflector's store that keeps nothing: it counts its
// reflector's first complete list (Replace) into synced.
type countingStore struct {
	synced *atomic.Int64
	once   sync.Once
}

func (s *countingStore) Add(any) error    { return nil }
func (s *countingStore) Update(any) error { return nil }
func (s *countingStore) Delete(any) error { return nil }
func (s *countingStore) Resync() error    { return nil }

func (s *countingStore) Replace([]any, string) error {
	s.once.Do(func() { s.synced.Add(1) })
	return nil
}
