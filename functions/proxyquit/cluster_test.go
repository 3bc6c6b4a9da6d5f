package proxyquit

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/istio-aux/istio-aux/pkg/slim"
)

// countingCluster serves namespaces from a map, counting reads; a read
// blocks until release is closed (when set), so concurrent callers overlap.
type countingCluster struct {
	Cluster
	reads   atomic.Int64
	labels  map[string]string
	err     error
	release chan struct{}
}

func (c *countingCluster) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	c.reads.Add(1)
	if c.release != nil {
		<-c.release
	}
	if c.err != nil {
		return nil, c.err
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: c.labels}}, nil
}

func TestNamespaceCacheReusesWithinTTL(t *testing.T) {
	ctx := context.Background()
	backend := &countingCluster{labels: map[string]string{"istio-aux.dev/enabled": "true"}}
	c := NewNamespaceCache(backend)
	now := time.Unix(1_700_000_000, 0)
	c.now = func() time.Time { return now }

	for range 3 {
		ns, err := c.Namespace(ctx, "ml")
		if err != nil || ns.Labels["istio-aux.dev/enabled"] != "true" {
			t.Fatalf("got %v, %v", ns, err)
		}
	}
	if n := backend.reads.Load(); n != 1 {
		t.Fatalf("%d reads within the TTL, want 1", n)
	}
	if _, err := c.Namespace(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if n := backend.reads.Load(); n != 2 {
		t.Fatalf("another namespace: %d reads, want 2", n)
	}
	// A relabel is seen once the entry expires.
	backend.labels = nil
	now = now.Add(NamespaceTTL)
	ns, err := c.Namespace(ctx, "ml")
	if err != nil || len(ns.Labels) != 0 || backend.reads.Load() != 3 {
		t.Fatalf("after the TTL: %v, %v, %d reads", ns, err, backend.reads.Load())
	}
}

func TestNamespaceCacheDoesNotCacheErrors(t *testing.T) {
	ctx := context.Background()
	backend := &countingCluster{err: errors.New("apiserver down")}
	c := NewNamespaceCache(backend)
	for range 2 {
		if _, err := c.Namespace(ctx, "ml"); err == nil {
			t.Fatal("error swallowed")
		}
	}
	backend.err = nil
	if _, err := c.Namespace(ctx, "ml"); err != nil {
		t.Fatalf("recovered API server: %v", err)
	}
	if n := backend.reads.Load(); n != 3 {
		t.Fatalf("%d reads, want every failed read retried (3)", n)
	}
}

func TestNamespaceCacheSharesConcurrentReads(t *testing.T) {
	ctx := context.Background()
	backend := &countingCluster{release: make(chan struct{})}
	c := NewNamespaceCache(backend)
	const callers = 50
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			_, err := c.Namespace(ctx, "ml")
			errs <- err
		})
	}
	// Every caller is either waiting on the one read or about to hit the
	// cache it fills; release the read once it has started.
	deadline := time.Now().Add(10 * time.Second)
	for backend.reads.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(backend.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := backend.reads.Load(); n != 1 {
		t.Fatalf("%d concurrent callers made %d reads, want 1", callers, n)
	}
}

func TestNamespaceCacheIsBounded(t *testing.T) {
	c := NewNamespaceCache(&countingCluster{})
	now := time.Unix(1_700_000_000, 0)
	c.now = func() time.Time { return now }
	for i := range maxNamespaceEntries + 10 {
		if _, err := c.Namespace(context.Background(), "ns-"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.entries); n > maxNamespaceEntries {
		t.Fatalf("%d entries, bound %d", n, maxNamespaceEntries)
	}
}

// versionCluster records the resourceVersion of every pod read and can
// refuse cached reads or report the pod gone.
type versionCluster struct {
	countingCluster
	pod        *corev1.Pod
	reads      []string
	failCached bool
	gone       bool
}

func (c *versionCluster) Pod(_ context.Context, namespace, name, notOlderThan string) (*corev1.Pod, error) {
	c.reads = append(c.reads, notOlderThan)
	switch {
	case c.gone:
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	case c.failCached && notOlderThan != "":
		return nil, apierrors.NewTimeoutError("Too large resource version", 1)
	}
	return c.pod.DeepCopy(), nil
}

func TestLivePodReadsNotOlderThanTheEvent(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w", UID: "u", ResourceVersion: "42"}}
	cases := map[string]struct {
		eventRV          string
		failCached, gone bool
		want             []string
	}{
		"served at the event's version":         {eventRV: "42", want: []string{"42"}},
		"cache cannot answer: read from etcd":   {eventRV: "42", failCached: true, want: []string{"42", ""}},
		"gone at that version: no second read":  {eventRV: "42", gone: true, want: []string{"42"}},
		"0 would accept any state: most recent": {eventRV: "0", want: []string{""}},
		"no version: most recent":               {eventRV: "", want: []string{""}},
		"not a version: most recent":            {eventRV: "abc", want: []string{""}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := &versionCluster{pod: pod, failCached: tc.failCached, gone: tc.gone}
			f, err := New(DefaultConfig(), c, &fakeExecer{}, record.NewFakeRecorder(10), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := pod.DeepCopy()
			want.ResourceVersion = tc.eventRV
			f.livePod(context.Background(), slim.Of(want))
			if !slices.Equal(c.reads, tc.want) {
				t.Errorf("reads at %q, want %q", c.reads, tc.want)
			}
		})
	}
}
