//go:build e2e

package bench

import (
	"context"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/realnode"
)

// TestMain runs the benchmarks inside a network namespace of their own
// where the machine can host a real node (TestBenchCompletion needs one);
// elsewhere they run as they are and that part skips, saying why.
func TestMain(m *testing.M) { os.Exit(realnode.RunInNetns(m.Run)) }

// params sizes a run; BENCH_QUICK=1 picks the small one for iteration.
type params struct {
	creates          int   // sequential pod CREATEs per arm
	memLevels        []int // watched Running pods
	reactionPods     int
	trickleEvery     time.Duration
	burstWithin      time.Duration
	jobs             int
	scaleDeadline    time.Duration
	outsidePods      int           // run-to-completion pods outside the opt-in
	outsideChurn     int           // their status changes a second, in total
	cpuWindow        time.Duration // over which the namespaces part reads CPU
	cpuPairs         int           // interleaved pairs of windows of the outside part
	cpuSlice         time.Duration // each of those windows
	namespaces       []int         // the namespaces part's sizes N
	perNamespaceUpTo int           // the largest N at which its per-namespace stand-in runs (docs/bench.md)
}

// benchParams are the full run's sizes, or the quick run's with BENCH_QUICK;
// BENCH_NAMESPACES (comma-separated) replaces the namespaces part's sizes.
func benchParams(t *testing.T) params {
	p := sizes()
	if v := os.Getenv("BENCH_NAMESPACES"); v != "" {
		p.namespaces = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("BENCH_NAMESPACES=%q: want sizes such as 1000,10000", v)
			}
			p.namespaces = append(p.namespaces, n)
		}
	}
	return p
}

func sizes() params {
	if os.Getenv("BENCH_QUICK") != "" {
		return params{creates: 100, memLevels: []int{0, 500, 1000}, reactionPods: 40,
			trickleEvery: 250 * time.Millisecond, burstWithin: 2 * time.Second, jobs: 100, scaleDeadline: 5 * time.Minute,
			outsidePods: 2000, outsideChurn: 10, cpuWindow: 20 * time.Second, cpuPairs: 3, cpuSlice: 5 * time.Second, namespaces: []int{100}, perNamespaceUpTo: 100}
	}
	return params{creates: 3000, memLevels: []int{0, 1000, 5000, 10000}, reactionPods: 200,
		trickleEvery: 250 * time.Millisecond, burstWithin: 2 * time.Second, jobs: 1000, scaleDeadline: 10 * time.Minute,
		outsidePods: 10000, outsideChurn: 10, cpuWindow: 90 * time.Second, cpuPairs: 8, cpuSlice: 15 * time.Second, namespaces: []int{1000, 10000}, perNamespaceUpTo: 1000}
}

// logWriter is where the processes a test starts write: the log file of
// docs/bench.md, or stderr with BENCH_VERBOSE.
func logWriter(t *testing.T) io.Writer {
	w, closeLog := cluster.ProcessLog("istio-aux-bench.log", "BENCH_VERBOSE")
	t.Cleanup(closeLog)
	return w
}

// fastClient is an admin client without client-go's default 5 QPS limit
// (the bench's own requests must not be what is measured), speaking
// protobuf if asked.
func fastClient(t *testing.T, c *cluster.Cluster, protobuf bool) kubernetes.Interface {
	rc := c.RESTConfig()
	rc.QPS, rc.Burst = 2000, 4000
	if protobuf {
		useProtobuf(rc)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// useProtobuf makes rc speak protobuf, as internal/kube's clients do.
func useProtobuf(rc *rest.Config) {
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
}

// only reports whether BENCH_ONLY (a comma-separated list of parts; empty:
// all) selects a part, for iterating on one measurement.
func only(part string) bool {
	sel := os.Getenv("BENCH_ONLY")
	return sel == "" || slices.ContainsFunc(strings.Split(sel, ","), func(p string) bool { return strings.TrimSpace(p) == part })
}

// TestBench runs every measurement in one go, in three control planes:
// two without kwok, for admission and memory and for the watch scope
// (their pods are parked on a node that does not exist), one with the Job
// controller and kwok for reaction and scale.
func TestBench(t *testing.T) {
	p := benchParams(t)
	res := newResults(t)
	log := logWriter(t)
	stage(t, "admission+memory", cluster.Options{Log: log}, func(t *testing.T, c *cluster.Cluster, start func() *istioaux.IstioAux, cs kubernetes.Interface) {
		// Admission measures first without istio-aux, then starts it.
		var a *istioaux.IstioAux
		if only("admission") {
			a = admission(t, c, cs, start, p, res, log)
		} else {
			a = start()
		}
		if only("memory") {
			memory(t, c, a, cs, p, res, log)
		}
	}, "admission", "memory")
	// Which pods the bridge watches: a control plane of its own, so that no
	// other part's pods are opted in. Its API server serves /debug/pprof:
	// the namespaces part has it collect its garbage before each measure
	// (collectGarbage), and saves its profiles with BENCH_PROFILE. It does
	// not check its watch cache against etcd (DetectCacheInconsistency, on
	// by default since Kubernetes 1.34): every 5 to 7.5 minutes that lists
	// every pod from etcd, 100,000 at the largest size, and costs seconds
	// of CPU and a collection of its heap wherever it falls, with istio-aux
	// or without (docs/bench.md).
	scopeOpts := cluster.Options{Log: log, Profiling: true,
		APIServerArgs: []string{"--feature-gates=DetectCacheInconsistency=false"}}
	stage(t, "watch-scope", scopeOpts, func(t *testing.T, c *cluster.Cluster, start func() *istioaux.IstioAux, cs kubernetes.Interface) {
		a := start()
		if only("outside") {
			outside(t, a, cs, p, res)
		}
		if only("namespaces") {
			namespaceScale(t, c, a, cs, p, res)
		}
	}, "outside", "namespaces")
	stage(t, "reaction+scale", cluster.Options{ControllerManager: true, Kwok: true, Log: log}, func(t *testing.T, c *cluster.Cluster, start func() *istioaux.IstioAux, cs kubernetes.Interface) {
		a := start()
		if only("reaction") {
			reaction(t, c, cs, p, res)
		}
		if only("scale") {
			scale(t, c, a, cs, p, res)
		}
	}, "reaction", "scale")
}

// stage runs fn as subtest name on a control plane of its own (opts), when
// BENCH_ONLY selects one of parts, and unless an earlier stage failed
// (BENCH_KEEP_GOING runs it anyway). fn starts istio-aux with start; both
// stop when the subtest ends, even when it fails.
func stage(t *testing.T, name string, opts cluster.Options,
	fn func(*testing.T, *cluster.Cluster, func() *istioaux.IstioAux, kubernetes.Interface), parts ...string) {
	if t.Failed() && os.Getenv("BENCH_KEEP_GOING") == "" || !slices.ContainsFunc(parts, only) {
		return
	}
	t.Run(name, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		c, err := cluster.Start(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		var a *istioaux.IstioAux
		t.Cleanup(func() {
			if a != nil {
				if err := a.Stop(); err != nil {
					t.Log(err)
				}
			}
			if err := c.Stop(); err != nil {
				t.Log(err)
			}
		})
		fn(t, c, func() *istioaux.IstioAux {
			if a, err = istioaux.Start(context.Background(), c, opts.Log); err != nil {
				t.Fatal(err)
			}
			return a
		}, fastClient(t, c, false))
	})
}
