//go:build e2e

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/poll"
)

// apiWindow, after quiesce, reads into s the open pod watches, then, over
// p.cpuWindow of p.outsideChurn status changes a second among pods, the
// API server's CPU and its GC's share, its RSS (the median of the window's
// second half) and its live heap at the end.
func apiWindow(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, pods []podRef, p params, s nsArm) nsArm {
	ctx := context.Background()
	api := c.Pids()["kube-apiserver"]
	quiesce(t, cs, api)
	s.watches = apiserverMetric(t, cs, "apiserver_longrunning_requests", `resource="pods"`, `verb="WATCH"`)
	gc0, alloc0 := apiserverGC(t, cs), apiserverAllocs(t, cs)
	profiled := profileAPIServer(t, cs, p.cpuWindow)
	cpu0, start := cpuOf(t, api), time.Now()
	stop := churn(ctx, cs, pods, p.outsideChurn)
	var rss []int64
	if err := poll.UntilEvery(ctx, time.Second, p.cpuWindow+time.Minute, func(context.Context) (bool, error) {
		v, err := procStatusKiB(api, "VmRSS")
		if err != nil {
			return false, poll.Permanent(err)
		}
		if time.Since(start) >= p.cpuWindow/2 {
			rss = append(rss, v)
		}
		return time.Since(start) >= p.cpuWindow, nil
	}); err != nil {
		t.Fatal(err)
	}
	s.apiWindow = cpuOf(t, api) - cpu0
	s.apiGC = apiserverGC(t, cs) - gc0
	s.allocWindow = apiserverAllocs(t, cs) - alloc0
	s.changes = stop()
	slices.Sort(rss)
	s.apiRSS = rss[len(rss)/2]
	s.apiHeap = apiserverMetric(t, cs, "go_gc_heap_live_bytes")
	profiled()
	return s
}

// apiProfiles numbers the API server's profiles of a run.
var apiProfiles atomic.Int32

// profileAPIServer, with BENCH_PROFILE naming a directory, saves a CPU
// profile of the API server over the next d there (apiserver-N.pprof, its
// name logged), for finding where a window's CPU goes; the function it
// returns waits for it. Without BENCH_PROFILE it does nothing. The
// profiler's own cost (100 samples a second) is in the window's CPU.
//
//	BENCH_PROFILE=/tmp/prof BENCH_ONLY=namespaces BENCH_NAMESPACES=10000 make bench
//	go tool pprof -top -diff_base /tmp/prof/apiserver-2.pprof _output/bin/kube-apiserver /tmp/prof/apiserver-5.pprof
func profileAPIServer(t *testing.T, cs kubernetes.Interface, d time.Duration) (wait func()) {
	dir := os.Getenv("BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	path := filepath.Join(dir, fmt.Sprintf("apiserver-%d.pprof", apiProfiles.Add(1)))
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
		defer cancel()
		b, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(int(d.Seconds()))).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(path, b, 0o644)
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			t.Logf("API server profile: %v", err)
			return
		}
		t.Logf("API server CPU profile of this window: %s", path)
	}
}

// quiesce has the API server collect its garbage (collectGarbage), waits
// until its RSS has held within 1% for 10 s, and collects once more, so
// that the window that follows starts right after a collection: read
// straight away after the bench's own writes or a bridge's starts, its RSS
// moves by 10 to 15% between two windows on the same pods, and a
// collection of a heap of gigabytes falls in a window or not by chance
// (docs/bench.md).
func quiesce(t *testing.T, cs kubernetes.Interface, api int) {
	ctx := context.Background()
	start := time.Now()
	collectGarbage(t, cs, api)
	rss, err := steadyRSS(ctx, api, time.Second, 10, 2*time.Minute)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		t.Logf("namespaces: API server RSS still moving: %v", err)
	case err != nil:
		t.Fatal(err)
	}
	collectGarbage(t, cs, api)
	t.Logf("namespaces: API server quiet after %v, RSS %s", time.Since(start).Round(time.Second), mib(rss))
}

// collectGarbage has the API server run a garbage collection now, then
// waits until it is quiet again (under apiQuiet CPU-ms over a second, at
// most 30 s): a heap profile asked with gc=1 runs runtime.GC first (Go's
// net/http/pprof; the watch-scope control plane serves /debug/pprof), and
// the runtime then sweeps the heap and returns memory in the background,
// which would be read as part of what follows. At N=10,000 the API
// server's heap is 3 GiB and a collection costs it about 4 CPU-s, as much
// as a start of the bridge: started right after one, a start or a window
// holds none (the next comes once the heap has doubled, or 2 minutes
// later), and the garbage it leaves is read as the bytes it allocated
// instead (docs/bench.md).
func collectGarbage(t *testing.T, cs kubernetes.Interface, api int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx); err != nil {
		t.Fatalf("collecting the API server's garbage: %v", err)
	}
	start, last, lastAt := time.Now(), cpuOf(t, api), time.Now()
	var rate float64
	err := poll.UntilEvery(ctx, time.Second, 30*time.Second, func(context.Context) (bool, error) {
		if time.Since(lastAt) < time.Second/2 { // the first look, at once
			return false, nil
		}
		now, at := cpuOf(t, api), time.Now()
		rate = msPerSecond(now-last, at.Sub(lastAt))
		last, lastAt = now, at
		return rate < apiQuiet, nil
	})
	if err != nil {
		t.Logf("namespaces: API server not quiet 30 s after a collection (%.0f CPU-ms/s over the last second): %v", rate, err)
		return
	}
	t.Logf("namespaces: API server collected its garbage, quiet after %v (%.0f CPU-ms/s over the last second)", time.Since(start).Round(time.Second), rate)
}

// apiQuiet is the CPU rate (CPU-ms/s) under which the API server is
// quiet: idle, with nothing but its leases, it spends 9 to 40.
const apiQuiet = 50

// apiserverAllocs is the bytes the API server has allocated on its heap so
// far (runtime/metrics /gc/heap/allocs:bytes): what its collections cost
// grows with them, whenever they run.
func apiserverAllocs(t *testing.T, cs kubernetes.Interface) float64 {
	return apiserverMetric(t, cs, "go_gc_heap_allocs_bytes_total")
}

// apiserverGC is the CPU time the API server's Go runtime estimates it
// spent collecting garbage so far (runtime/metrics /cpu/classes/gc/total):
// the CPU per change is compared without it, since a collection falls in a
// window or not by chance (docs/bench.md).
func apiserverGC(t *testing.T, cs kubernetes.Interface) time.Duration {
	return time.Duration(apiserverMetric(t, cs, "go_cpu_classes_gc_total_cpu_seconds_total") * float64(time.Second))
}

// logFootprint logs the size of the API server's etcd database (the full
// run's largest size must stay within etcd's default quota, 2 GiB), the API
// server's RSS and the memory left on the machine.
func logFootprint(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface) {
	db := apiserverMetric(t, cs, "apiserver_storage_size_bytes")
	rss, err := procStatusKiB(c.Pids()["kube-apiserver"], "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	avail, err := procKiB("/proc/meminfo", "MemAvailable")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("namespaces: etcd database %.1f MiB, API server RSS %s, memory available %s", db/(1<<20), mib(rss), mib(avail))
}

// The previous bridge's watch client (bridge/app's watchClient): protobuf,
// at 100 requests a second with bursts of 200, its watches included.
const (
	perNamespaceQPS   = 100
	perNamespaceBurst = 200
)

// perNamespaceDeadline bounds the opening of perNamespaceWatches: past it
// the arm is skipped (docs/bench.md).
const perNamespaceDeadline = 5 * time.Minute

// openPerNamespaceWatches stands in for the previous bridge's pod
// requests (docs/bench.md): one client-go reflector per namespace in
// names, listing and watching that namespace's pods with
// watch.PodFieldSelector, protobuf, through one client at the previous
// bridge's rate limit, on the cluster rc points at. The pods are counted
// and dropped. listed is how many reflectors have their first list in;
// stop ends every watch and waits for the reflectors to return.
func openPerNamespaceWatches(rc *rest.Config, names []string) (listed func() int, stop func(), err error) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = perNamespaceQPS, perNamespaceBurst
	useProtobuf(rc)
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var synced atomic.Int64
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
		r := cache.NewReflectorWithOptions(lw, &corev1.Pod{}, &countingStore{synced: &synced},
			cache.ReflectorOptions{Name: "pods/" + ns, TypeDescription: "*v1.Pod"})
		wg.Go(func() { r.RunWithContext(ctx) })
	}
	return func() int { return int(synced.Load()) }, func() { cancel(); wg.Wait() }, nil
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
