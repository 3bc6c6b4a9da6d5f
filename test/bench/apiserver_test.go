//go:build e2e

package bench

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/poll"
)

// apiWindow reads the open pod watches, then, over p.cpuWindow of
// p.outsideChurn status changes a second among pods, the API server's CPU
// and, of it, what its Go runtime counts as garbage collection; its RSS
// once a second (s.apiRSS: the median of the window's second half) and its
// live heap at the end, into s; after quiesce.
func apiWindow(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, pods []podRef, p params, s *nsArm) {
	ctx := context.Background()
	api := c.Pids()["kube-apiserver"]
	quiesce(t, cs, api)
	var err error
	if s.watches, err = apiserverMetric(ctx, cs, "apiserver_longrunning_requests", `resource="pods"`, `verb="WATCH"`); err != nil {
		t.Fatal(err)
	}
	gc0 := apiserverGC(t, cs)
	cpu0, start := cpuOf(t, api), time.Now()
	stop := churn(ctx, cs, pods, p.outsideChurn)
	var rss []int64
	// RSS read once a second over the window's second half; its median is
	// the figure.
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
	s.apiWindow, s.window = cpuOf(t, api)-cpu0, time.Since(start)
	s.apiGC = apiserverGC(t, cs) - gc0
	s.changes = stop()
	slices.Sort(rss)
	s.apiRSS = rss[len(rss)/2]
	if s.apiHeap, err = apiserverMetric(ctx, cs, "go_gc_heap_live_bytes"); err != nil {
		t.Fatal(err)
	}
}

// quiesce waits until the API server has collected its garbage once since
// it is called (its Go runtime forces a collection every 2 minutes at
// least), then until its RSS has held within 1% for 10 s. After the bench's
// own writes (a set of pods created) or a bridge's starts (each a list of
// every pod) its heap holds their garbage until the next collection, and
// its runtime returns the memory freed by a collection over the next tens
// of seconds: read straight away, its RSS moves by 10 to 15% between two
// windows on the same pods. A window that starts after a collection also
// sees the next forced one only after 2 minutes.
func quiesce(t *testing.T, cs kubernetes.Interface, api int) {
	ctx := context.Background()
	gcs := func() float64 {
		v, err := apiserverMetric(ctx, cs, "go_gc_duration_seconds_count")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	start := time.Now()
	if n0 := gcs(); n0 > 0 { // 0: not exported
		// Once a second: each look reads the API server's /metrics.
		if err := poll.UntilEvery(ctx, time.Second, 3*time.Minute, func(context.Context) (bool, error) {
			return gcs() > n0, nil
		}); err != nil {
			t.Fatalf("the API server did not collect its garbage: %v", err)
		}
	}
	rss, err := steadyRSS(ctx, api, time.Second, 10, 2*time.Minute)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		t.Logf("namespaces: API server RSS still moving: %v", err)
	case err != nil:
		t.Fatal(err)
	}
	t.Logf("namespaces: API server quiet after %v, RSS %s", time.Since(start).Round(time.Second), mib(rss))
}

// apiserverGC is the CPU time the API server's Go runtime estimates it
// spent collecting garbage so far (runtime/metrics /cpu/classes/gc/total).
// A collection of a heap of gigabytes costs a CPU-second or more, and falls
// in a window or not by chance (the runtime forces one every 2 minutes at
// least); and what it costs is in proportion to the API server's heap,
// which the bench's own writes make larger before (c) than before (d). The
// CPU per change is compared without it. The runtime adds a collection's
// CPU to the metric as it ends: one that straddles a window's edge is
// counted in the wrong window, which a window of 90 s makes rare, and a
// bridge's start (a second) would not.
func apiserverGC(t *testing.T, cs kubernetes.Interface) time.Duration {
	v, err := apiserverMetric(context.Background(), cs, "go_cpu_classes_gc_total_cpu_seconds_total")
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(v * float64(time.Second))
}

// logFootprint logs the size of the API server's etcd database (the full
// run's largest size must stay within etcd's default quota, 2 GiB), the API
// server's RSS and the memory left on the machine.
func logFootprint(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface) {
	db, err := apiserverMetric(context.Background(), cs, "apiserver_storage_size_bytes")
	if err != nil {
		t.Fatal(err)
	}
	rss, err := procStatusKiB(c.Pids()["kube-apiserver"], "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	avail := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
				avail = strings.TrimSpace(v)
			}
		}
	}
	t.Logf("namespaces: etcd database %.1f MiB, API server RSS %s, memory available %s", db/(1<<20), mib(rss), avail)
}
