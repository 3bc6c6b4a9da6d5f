package webhook

import (
	"fmt"
	"runtime"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// maxConcurrentHeap bounds the heap 32 concurrent AdmissionReviews of about
// 3 MiB may take (issue 24, row 4: 285 MiB for 8 and 524 MiB for 16 before,
// over the webhook's 256 MiB limit, which let pods in without the hold).
const maxConcurrentHeap = 100 << 20

// 32 reviews of the largest pods the API server passes (3 MiB), sent at once,
// in the shapes that cost a decoder the most: many small labels (the attack:
// the webhook decoded every label to read two), init containers (a list
// admission.Mutate reads), and annotations it does not read. The heap they take
// together, above what the process held before, stays under
// maxConcurrentHeap: reviews wait for a share of ReviewBudget before their
// bodies are read, and decoding one copies only the few values admission.Mutate reads.
//
//	go test -run 'TestConcurrentReviewsStayBounded$' -v ./webhook/
func TestConcurrentReviewsStayBounded(t *testing.T) {
	const concurrent = 32
	f := newFixture(t, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	// As config/ ships it: no line per admission.
	f.ctx = logging.WithLogger(f.ctx, zap.NewNop().Sugar())
	h := f.handler()
	shapes := []struct {
		name string
		pod  func(n int) string // a pod's JSON with n of its repeated part
		unit int                // bytes each part adds, about
	}{
		{"142,000 labels", func(n int) string {
			return `{"metadata":{"labels":{` + repeat(n, func(i int) string { return fmt.Sprintf(`"l%07d":"v%07d"`, i, i) }) + `}},"spec":{"containers":[{"name":"app"}]}}`
		}, 22},
		{"230,000 init containers", func(n int) string {
			return `{"metadata":{},"spec":{"initContainers":[` + repeat(n, func(i int) string { return fmt.Sprintf(`{"name":"c%d"}`, i%10) }) + `],"containers":[{"name":"app"}]}}`
		}, 14},
		{"120,000 annotations", func(n int) string {
			return `{"metadata":{"annotations":{` + repeat(n, func(i int) string { return fmt.Sprintf(`"a%07d":"\u0026%07d"`, i, i) }) + `}},"spec":{"containers":[{"name":"app"}]}}`
		}, 27},
	}
	for _, shape := range shapes {
		raw := shape.pod((3<<20 - 4<<10) / shape.unit)
		req := podRequest(t, "ml", nil, nil)
		req.Object.Raw = []byte(raw)
		body := reviewBody(t, req)
		if len(body) > MaxReviewBytes || len(body) < 3<<20-64<<10 {
			t.Fatalf("%s: a %d-byte review, want about 3 MiB", shape.name, len(body))
		}
		start := time.Now()
		peak := peakHeap(func() {
			var wg sync.WaitGroup
			for range concurrent {
				wg.Go(func() {
					rec := serveReview(t, h, body)
					if !strings.Contains(rec.Body.String(), `"allowed":true`) {
						t.Errorf("%s: answer %s", shape.name, rec.Body)
					}
				})
			}
			wg.Wait()
		})
		t.Logf("%-24s %d concurrent reviews of %.2f MiB: peak heap %.1f MiB above the start (bound %d MiB); %v",
			shape.name, concurrent, float64(len(body))/(1<<20), float64(peak)/(1<<20), maxConcurrentHeap>>20, time.Since(start).Round(time.Millisecond))
		if peak > maxConcurrentHeap {
			t.Errorf("%s: %d concurrent reviews took %.1f MiB of heap, want ≤ %d MiB", shape.name, concurrent, float64(peak)/(1<<20), maxConcurrentHeap>>20)
		}
	}
}

// repeat joins part(0) … part(n-1) with commas.
func repeat(n int, part func(int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = part(i)
	}
	return strings.Join(parts, ",")
}

// peakHeap runs f and returns the most heap (live objects and garbage not
// yet collected, as the Go runtime counts them) in use while it ran, above
// what was in use when it started, sampling every 100 µs.
func peakHeap(f func()) uint64 {
	runtime.GC()
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	rtmetrics.Read(sample)
	base := sample[0].Value.Uint64()
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			rtmetrics.Read(s)
			if v := s[0].Value.Uint64(); v > base && v-base > peak.Load() {
				peak.Store(v - base)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(done)
	<-sampled
	return peak.Load()
}
