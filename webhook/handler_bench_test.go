package webhook

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// BenchmarkHandler is one admission through the webhook's HTTP handler
// (the review budget, reading the body, Review; no TLS), logging at warn as
// config/ ships it: the webhook's CPU per request that is not the network.
func BenchmarkHandler(b *testing.B) {
	f := newFixture(b, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(zapcore.WarnLevel)
	cfg.OutputPaths = []string{"/dev/null"}
	l, err := cfg.Build()
	if err != nil {
		b.Fatal(err)
	}
	f.ctx = logging.WithLogger(f.ctx, l.Sugar())
	wh := f.handler()
	body := reviewBody(b, benchRequest(b, "ml", nil))
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		serveReview(b, wh, body)
	}
}
