package webhook

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"go.uber.org/zap"
	"knative.dev/pkg/logging"
)

// BenchmarkAdmitLatency times every in-process Admit of a mutated TFJob
// worker pod and reports the latency percentiles (ns/op alone hides the
// tail that the API server's webhook timeout cares about). hack/bench.sh
// reads p50-µs and p99-µs.
func BenchmarkAdmitLatency(b *testing.B) {
	fx := newFixture(b, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	ctx := logging.WithLogger(context.Background(), zap.NewNop().Sugar())
	req := benchRequest(b, "ml", nil)
	// Warm up caches and the allocator so the percentiles describe the
	// steady state, not the first call.
	for range 100 {
		fx.r.Admit(ctx, req)
	}
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		resp := fx.r.Admit(ctx, req)
		lat = append(lat, time.Since(start))
		if !resp.Allowed || len(resp.Patch) == 0 {
			b.Fatalf("pod not mutated: allowed=%v patch=%q", resp.Allowed, resp.Patch)
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
