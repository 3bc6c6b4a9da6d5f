//go:build e2e

package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
)

// params sizes a run; BENCH_QUICK=1 picks the small one for iteration.
type params struct {
	creates       int   // sequential pod CREATEs per arm
	memLevels     []int // watched Running pods
	reactionPods  int
	trickleEvery  time.Duration
	burstWithin   time.Duration
	jobs          int
	scaleDeadline time.Duration
	outsidePods   int           // run-to-completion pods outside the opt-in
	outsideChurn  int           // their status changes a second, in total
	cpuWindow     time.Duration // over which the namespaces part reads CPU
	cpuPairs      int           // interleaved pairs of windows of the outside part
	cpuSlice      time.Duration // each of those windows
	// Sizes of the namespaces part: N opted-in namespaces of
	// podsPerNamespace pods each, against one namespace of as many pods.
	namespaces []int
	// The largest N at which the per-namespace stand-in runs: each of its
	// watches holds about 0.6 MiB of the API server's heap (1.3 GiB of RSS
	// at 1,000 in a quick run), 10,000 would not fit beside the rest.
	perNamespaceUpTo int
}

func benchParams() params {
	if os.Getenv("BENCH_QUICK") != "" {
		return params{creates: 100, memLevels: []int{0, 500, 1000}, reactionPods: 40,
			trickleEvery: 250 * time.Millisecond, burstWithin: 2 * time.Second, jobs: 100, scaleDeadline: 5 * time.Minute,
			outsidePods: 2000, outsideChurn: 10, cpuWindow: 20 * time.Second, cpuPairs: 3, cpuSlice: 5 * time.Second, namespaces: []int{100}, perNamespaceUpTo: 100}
	}
	return params{creates: 3000, memLevels: []int{0, 1000, 5000, 10000}, reactionPods: 200,
		trickleEvery: 250 * time.Millisecond, burstWithin: 2 * time.Second, jobs: 1000, scaleDeadline: 10 * time.Minute,
		outsidePods: 10000, outsideChurn: 10, cpuWindow: 90 * time.Second, cpuPairs: 8, cpuSlice: 15 * time.Second, namespaces: []int{1000, 10000}, perNamespaceUpTo: 1000}
}

func logWriter(t *testing.T) io.Writer {
	if os.Getenv("BENCH_VERBOSE") != "" {
		return os.Stderr
	}
	f, err := os.Create(filepath.Join(os.TempDir(), "istio-aux-bench.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	t.Logf("process logs: %s", f.Name())
	return f
}

// fastClient is an admin client without client-go's default 5 QPS limit:
// the bench's own requests must not be what is measured.
func fastClient(t *testing.T, c *cluster.Cluster) kubernetes.Interface {
	return clientFor(t, c, func(*rest.Config) {})
}

// clientFor is fastClient with its configuration changed by tweak.
func clientFor(t *testing.T, c *cluster.Cluster, tweak func(*rest.Config)) kubernetes.Interface {
	rc := c.RESTConfig()
	rc.QPS, rc.Burst = 2000, 4000
	tweak(rc)
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// startStack starts a control plane and istio-aux on it, stopping both
// when the test ends, even when it fails.
func startStack(t *testing.T, opts cluster.Options) (*cluster.Cluster, func() *istioaux.IstioAux) {
	t.Helper()
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
	// istio-aux starts later in some phases (to measure without it first).
	return c, func() *istioaux.IstioAux {
		var err error
		a, err = istioaux.Start(context.Background(), c, opts.Log)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
}

// only reports whether BENCH_ONLY (a comma-separated list of admission,
// memory, outside, namespaces, reaction, scale; empty: all) selects a part,
// for iterating on one measurement.
func only(part string) bool {
	sel := os.Getenv("BENCH_ONLY")
	if sel == "" {
		return true
	}
	for _, p := range strings.Split(sel, ",") {
		if strings.TrimSpace(p) == part {
			return true
		}
	}
	return false
}

// TestBench runs every measurement in one go, in three control planes:
// two without kwok, for admission and memory and for the watch scope
// (their pods are parked on a node that does not exist), one with the Job
// controller and kwok for reaction and scale.
func TestBench(t *testing.T) {
	p := benchParams()
	res := newResults(t)
	log := logWriter(t)
	if only("admission") || only("memory") {
		t.Run("admission+memory", func(t *testing.T) {
			c, start := startStack(t, cluster.Options{Log: log})
			cs := fastClient(t, c)
			var a *istioaux.IstioAux
			if only("admission") {
				a = admission(t, c, cs, start, p, res, log)
			} else {
				a = start()
			}
			if only("memory") {
				memory(t, c, a, cs, p, res, log)
			}
		})
	}
	// Which pods the bridge watches: a control plane of its own, so that no
	// other part's pods are opted in.
	stage(t, "watch-scope", cluster.Options{Log: log}, func(t *testing.T, c *cluster.Cluster, a *istioaux.IstioAux, cs kubernetes.Interface) {
		if only("outside") {
			outside(t, a, cs, p, res)
		}
		if only("namespaces") {
			namespaceScale(t, c, a, cs, p, res)
		}
	}, "outside", "namespaces")
	stage(t, "reaction+scale", cluster.Options{ControllerManager: true, Kwok: true, Log: log}, func(t *testing.T, c *cluster.Cluster, a *istioaux.IstioAux, cs kubernetes.Interface) {
		if only("reaction") {
			reaction(t, c, cs, p, res)
		}
		if only("scale") {
			scale(t, c, a, cs, p, res)
		}
	}, "reaction", "scale")
}

// stage runs fn as subtest name on a control plane of its own (opts) with
// istio-aux started, when BENCH_ONLY selects one of parts, and unless an
// earlier stage failed (BENCH_KEEP_GOING runs it anyway).
func stage(t *testing.T, name string, opts cluster.Options, fn func(*testing.T, *cluster.Cluster, *istioaux.IstioAux, kubernetes.Interface), parts ...string) {
	if t.Failed() && os.Getenv("BENCH_KEEP_GOING") == "" {
		return
	}
	if !slices.ContainsFunc(parts, only) {
		return
	}
	t.Run(name, func(t *testing.T) {
		c, start := startStack(t, opts)
		a := start()
		fn(t, c, a, fastClient(t, c))
	})
}
