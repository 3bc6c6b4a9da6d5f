package webhook

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// BenchmarkAdmitLatency times every in-process admission of a mutated TFJob
// worker pod, from the AdmissionReview's bytes to the answer's (Review:
// decoding, Admit, encoding; no HTTP), and reports the latency percentiles
// (ns/op alone hides the tail that the API server's webhook timeout cares
// about). hack/bench.sh reads p50-µs and p99-µs.
func BenchmarkAdmitLatency(b *testing.B) {
	fx := newFixture(b, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	ctx := logging.WithLogger(context.Background(), zap.NewNop().Sugar())
	body := reviewBody(b, benchRequest(b, "ml", nil))
	// Warm up caches and the allocator so the percentiles describe the
	// steady state, not the first call.
	for range 100 {
		reviewOK(b, ctx, fx.r, body)
	}
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		out := reviewOK(b, ctx, fx.r, body)
		lat = append(lat, time.Since(start))
		if !bytes.Contains(out, []byte(`"patch":`)) {
			b.Fatalf("pod not mutated: %s", out)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(percentile(lat, 0.50).Seconds()*1e6, "p50-µs")
	b.ReportMetric(percentile(lat, 0.99).Seconds()*1e6, "p99-µs")
	b.ReportMetric(float64(len(lat)), "samples")
}

// percentile reads the q-quantile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
