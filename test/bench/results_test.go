//go:build e2e

package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/knative"
)

// results appends one tab-separated row per figure (area, measure, value,
// target, verdict) to $BENCH_RESULTS as soon as it is measured, so that a
// later failure keeps what was measured; hack/bench.sh prints them.
type results struct {
	mu sync.Mutex
	w  io.Writer
	t  *testing.T
}

func newResults(t *testing.T) *results {
	path := os.Getenv("BENCH_RESULTS")
	if path == "" {
		return &results{w: io.Discard, t: t}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &results{w: f, t: t}
}

// add records a figure; ok is "yes", "NO" or "" (no target).
func (r *results) add(area, measure, value, target, ok string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t.Logf("%-9s %-48s %-28s %-14s %s", area, measure, value, target, ok)
	fmt.Fprintf(r.w, "%s\t%s\t%s\t%s\t%s\n", area, measure, value, target, ok)
}

func verdict(met bool) string {
	if met {
		return "yes"
	}
	return "NO"
}

// percentile is the nearest-rank q-quantile of unsorted durations.
func percentile(d []time.Duration, q float64) time.Duration { return knative.Percentile(d, q) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func p50p99(d []time.Duration) string {
	return strings.Join([]string{ms(percentile(d, 0.5)), ms(percentile(d, 0.99))}, " / ")
}
