package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/logging"
	knwebhook "knative.dev/pkg/webhook"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// BenchmarkHandler is one admission through knative.dev/pkg's HTTP handler
// (review decoding, Admit, response encoding; no TLS), logging at warn as
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
	ctx := logging.WithLogger(f.ctx, l.Sugar())
	wh, err := knwebhook.New(knwebhook.WithOptions(ctx, knwebhook.Options{}), []any{f.r})
	if err != nil {
		b.Fatal(err)
	}
	wh.InformersHaveSynced()
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  benchRequest(b, "ml", nil),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		hr := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
		hr.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		wh.ServeHTTP(rec, hr)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}
