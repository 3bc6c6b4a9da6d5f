package watch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/pkg/keys"
)

func strayWatches(b *bridge) int { return int(testutil.ToFloat64(b.m.StrayWatches)) }

// TestOnlyTheClusterWideWatchIsOpen: pods the webhook labelled, in any
// number of namespaces, come through one watch; no namespace has its own.
func TestOnlyTheClusterWideWatchIsOpen(t *testing.T) {
	c, b, s := delivering(t, watch.Options{}, func(c *cluster) {
		for i := range 20 {
			c.namespace(fmt.Sprintf("team-%d", i), optedIn)
		}
	})
	var done []string
	for i := range 20 {
		ns := fmt.Sprintf("team-%d", i)
		name := fmt.Sprintf("job-%d", i) // a uid of its own
		c.createJob(ns, name)
		done = append(done, c.update(ns, name, appExits(0)))
	}
	testenv.Eventually(t, 5*time.Second, "every namespace's quit", func() bool {
		for _, id := range done {
			if s.count(id) != 1 {
				return false
			}
		}
		return true
	})
	if !b.lists.Watching("") || strayWatches(b) != 0 || watched(b, "all") != 21 {
		t.Errorf("cluster-wide watch open %v, %d stray watches, %d namespaces in scope; want true, 0, 21",
			b.lists.Watching(""), strayWatches(b), watched(b, "all"))
	}
	for i := range 20 {
		if ns := fmt.Sprintf("team-%d", i); b.lists.Watching(ns) {
			t.Errorf("namespace %s has a watch of its own", ns)
		}
	}
}

// TestAPodTheWebhookMissedIsFoundBySweep: a pod created in an opted-in
// namespace without the webhook's label (the webhook was down, its policy
// Ignore) is found by the next sweep (each resync period), gets its quit
// through a watch of its namespace, and that watch closes once the
// namespace holds no such pod. A pod opted out by its annotation is never
// quit, and makes no watch.
func TestAPodTheWebhookMissedIsFoundBySweep(t *testing.T) {
	const resync = 300 * time.Millisecond
	c, b, s := delivering(t, watch.Options{Resync: resync})
	sweeps := b.lists.Sweeps()
	c.createStray("jobs", "out", annotated("false"))
	c.update("jobs", "out", appExits(0))
	testenv.Eventually(t, 5*time.Second, "two more sweeps", func() bool { return b.lists.Sweeps() >= sweeps+2 })
	if strayWatches(b) != 0 || b.lists.Watching("jobs") {
		t.Fatalf("an opted-out pod opened a watch of its namespace")
	}

	c.createStray("jobs", "missed")
	// Its namespace's watch lists the opted-out pod too (a selector cannot
	// read annotations); it serves it no quit.
	testenv.Eventually(t, 5*time.Second, "the sweep to find it", func() bool { return b.lists.Watching("jobs") && b.w.CachedPods() == 2 })
	id := c.update("jobs", "missed", appExits(0))
	testenv.Eventually(t, 5*time.Second, "its quit", func() bool { return s.count(id) >= 1 })
	if got := testutil.ToFloat64(b.m.Strays); got != 1 {
		t.Errorf("strays %v, want 1 (the opted-out pod is not one)", got)
	}

	if err := c.client.CoreV1().Pods("jobs").Delete(context.Background(), "missed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the namespace's watch to close: only an opted-out pod is left", func() bool {
		return !b.lists.Watching("jobs") && strayWatches(b) == 0 && b.w.CachedPods() == 0
	})
	if s.count(id) == 0 || s.total() != s.count(id) {
		t.Errorf("the function saw %v, want only the missed pod's quit", s.seen)
	}
}

// TestAPodOutsideTheScopeIsNeverServed: a pod labelled as the webhook
// would, with its own opt-in label, in a namespace not in scope (the
// webhook's selectors would never have let it in) gets no quit, and is not
// even cached: the cluster-wide watch brings it, and it is dropped.
func TestAPodOutsideTheScopeIsNeverServed(t *testing.T) {
	c, b, s := delivering(t, watch.Options{})
	c.createStray("plain", "forged", labelled("true"), watchedAs("true"))
	c.update("plain", "forged", appExits(0))
	c.createJob("jobs", "x")
	xDone := c.update("jobs", "x", appExits(0))
	testenv.Eventually(t, 5*time.Second, "the opted-in pod's quit", func() bool { return s.count(xDone) == 1 })
	testenv.Eventually(t, 5*time.Second, "both pods' two states decoded", func() bool { return decoded(b) == 4 })
	if got := b.w.CachedPods(); got != 1 {
		t.Errorf("%d pods cached, want 1: the forged pod is not", got)
	}
	if s.total() != 1 {
		t.Errorf("the function saw %v, want only the opted-in pod's quit", s.seen)
	}
}

// TestTooManyPodsRefuses: past Options.MaxPods the watcher stops, drops its
// caches and says so with a *CapacityError, rather than grow until its
// container is OOM-killed.
func TestTooManyPodsRefuses(t *testing.T) {
	c := newCluster(t)
	for i := range 5 {
		c.createJob("jobs", fmt.Sprintf("p%d", i))
	}
	lists := testenv.NewLists(c.client, watch.PodFieldSelector)
	m := metrics.NewBridge(nil)
	w := watch.New(lists.Lists, nopPublisher{}, m, watch.Options{Source: "test", MaxPods: 3})
	ctx, cancel := context.WithTimeout(testenv.Context(t), 10*time.Second)
	defer cancel()
	err := w.Run(ctx)
	var ce *watch.CapacityError
	if !errors.As(err, &ce) || ce.Capacity != 3 || ce.Pods <= 3 {
		t.Fatalf("Run = %v, want a CapacityError over 3 pods", err)
	}
	// A refusing watcher is not ready, whether or not Run saw the cache
	// synced before the refusal (a fake's list is not streamed: the
	// refusal comes as the list is stored).
	if w.Synced() {
		t.Error("Synced after refusing")
	}
	if w.CachedPods() != 0 || testutil.ToFloat64(m.CachedPods) != 0 {
		t.Errorf("after refusing: %d pods cached (gauge %v); want none", w.CachedPods(), testutil.ToFloat64(m.CachedPods))
	}
	if ctx.Err() != nil {
		t.Error("Run returned only when its context ended")
	}

	// Under the limit, the same pods are served.
	w = watch.New(lists.Lists, nopPublisher{}, metrics.NewBridge(nil), watch.Options{Source: "test", MaxPods: 5})
	ctx2, cancel2 := context.WithCancel(testenv.Context(t))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx2) }()
	testenv.Eventually(t, 5*time.Second, "the watcher to sync", w.Synced)
	cancel2()
	if err := <-done; err != nil || w.CachedPods() != 0 || w.Synced() {
		t.Errorf("Run = %v, %d pods cached after it, Synced %v; want nil, none and not synced", err, w.CachedPods(), w.Synced())
	}
}

// TestLargePodsCountAsSeveral: a pod whose cache entry holds more than
// watch.CapacityHeapPerPod counts against the capacity as several, so
// that a few large pods cannot hold more memory than the capacity
// accounts for: one pod of 40 apps of the longest names makes a watcher of
// capacity 3 refuse.
func TestLargePodsCountAsSeveral(t *testing.T) {
	c := newCluster(t)
	c.createJob("jobs", "wide", func(p *corev1.Pod) {
		for i := range 40 {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("app-%02d-%s", i, strings.Repeat("x", 56))})
		}
	})
	lists := testenv.NewLists(c.client, watch.PodFieldSelector)
	w := watch.New(lists.Lists, nopPublisher{}, metrics.NewBridge(nil), watch.Options{Source: "test", MaxPods: 3})
	ctx, cancel := context.WithTimeout(testenv.Context(t), 10*time.Second)
	defer cancel()
	var ce *watch.CapacityError
	if err := w.Run(ctx); !errors.As(err, &ce) || ce.Pods < 4 {
		t.Fatalf("Run = %v, want a CapacityError: one pod of 40 apps counts as more than 3", err)
	}
	t.Logf("one pod of 40 apps: %v", ce)
}

// TestCapacity: the model's figures (docs/bench.md, "Memory").
func TestCapacity(t *testing.T) {
	for _, tc := range []struct {
		limit int64
		want  int
	}{{0, 0}, {1, 1}, {256 << 20, (256<<20 - watch.CapacityBase) / watch.CapacityPerPod}} {
		if got := watch.Capacity(tc.limit); got != tc.want {
			t.Errorf("Capacity(%d) = %d, want %d", tc.limit, got, tc.want)
		}
	}
	if got := watch.Capacity(256 << 20); got < 100_000 {
		t.Errorf("the deployed 256Mi holds %d pods, want at least 100,000 (issue: 10,000 namespaces of 10)", got)
	}
}

// nopPublisher acknowledges every event at once.
type nopPublisher struct{}

func (nopPublisher) Publish(_ context.Context, _ *event.Event, _ string, done func(error)) error {
	done(nil)
	return nil
}

func watchedAs(value string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[keys.LabelWatched] = value
	}
}

// TestAnyWatchedValueIsFound: an opted-in pod whose keys.LabelWatched says
// anything but "true" ("false", empty, garbage: its owner wrote it, or
// copied it from another pod) is not the cluster-wide watch's, so the sweep
// finds it and it gets its quit. Once it was in neither selection: no quit
// ever, the Job never completed.
func TestAnyWatchedValueIsFound(t *testing.T) {
	c, b, s := delivering(t, watch.Options{Resync: 200 * time.Millisecond})
	var done []string
	for i, value := range []string{"false", "", "garbage"} {
		name := fmt.Sprintf("labelled-%d", i)
		c.createStray("jobs", name, watchedAs(value))
		done = append(done, c.update("jobs", name, appExits(0)))
	}
	testenv.Eventually(t, 5*time.Second, "the quit of every pod, whatever its label says", func() bool {
		for _, id := range done {
			if s.count(id) != 1 {
				return false
			}
		}
		return true
	})
	if got := b.w.CachedPods(); got != 3 {
		t.Errorf("%d pods cached, want 3", got)
	}
}

// TestAPodWhoseLabelChangesIsServedOnce: a pod whose keys.LabelWatched is
// rewritten moves from one watch to the other (the API server reports it
// deleted to the one it leaves and added to the other): it is cached and
// counted once, and its quit delivered once, whichever watch brings it.
func TestAPodWhoseLabelChangesIsServedOnce(t *testing.T) {
	c, b, s := delivering(t, watch.Options{Resync: 200 * time.Millisecond})
	// A running pod labelled otherwise keeps the namespace's watch of such
	// pods open throughout.
	c.createStray("jobs", "anchor", watchedAs("false"))
	c.createJob("jobs", "moved")
	testenv.Eventually(t, 5*time.Second, "both pods cached, the namespace watched", func() bool {
		return b.lists.Watching("jobs") && b.w.CachedPods() == 2
	})
	c.update("jobs", "moved", watchedAs("false"))
	testenv.Eventually(t, 5*time.Second, "the cluster-wide watch to let it go", func() bool {
		return testutil.ToFloat64(b.m.WatchEvents.WithLabelValues("pod", "delete")) >= 1
	})
	done := c.update("jobs", "moved", appExits(0))
	testenv.Eventually(t, 5*time.Second, "its quit, through the namespace's watch", func() bool { return s.count(done) == 1 })
	if got := b.w.CachedPods(); got != 2 {
		t.Errorf("%d pods cached after the label changed, want 2", got)
	}
	back := c.update("jobs", "moved", watchedAs("true"))
	testenv.Eventually(t, 5*time.Second, "the namespace's watch to let it go", func() bool {
		return testutil.ToFloat64(b.m.WatchEvents.WithLabelValues("pod", "delete")) >= 2
	})
	testenv.Eventually(t, 5*time.Second, "two pods cached, each once", func() bool { return b.w.CachedPods() == 2 })
	if got := s.total(); got != 1 || s.count(done)+s.count(back) != 1 {
		t.Errorf("the function saw %v, want the moved pod's quit once", s.seen)
	}
}
