package webhook

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/otlptranslator"
	otelruntime "go.opentelemetry.io/contrib/instrumentation/runtime"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/istio-aux/istio-aux/webhook/admission"
)

// The names operators scrape: istio_aux_webhook_admissions_total, as when
// the counter was OpenTelemetry's served by knative's exporter, and the
// admission duration.
func TestMetricsPrometheusName(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.record(admission.Mutated, admission.ReasonHold)
	m.record(admission.Mutated, admission.ReasonHold)
	m.record(admission.Warned, admission.ReasonBadProxyConfig)
	m.duration.Observe(0.001)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	names := []string{}
	durations := uint64(0)
	for _, f := range families {
		names = append(names, f.GetName())
		if f.GetName() == MetricAdmissionDuration {
			durations = f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
		if f.GetName() != "istio_aux_webhook_admissions_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "outcome" {
					got[l.GetValue()] += s.GetCounter().GetValue()
				}
			}
		}
	}
	if got["mutated"] != 2 || got["warned"] != 1 || durations != 1 {
		t.Errorf("istio_aux_webhook_admissions_total by outcome = %v, %d durations; families %v", got, durations, names)
	}
	// The process's metrics are made once, whoever asks for them.
	if a, b := processMetrics(), processMetrics(); a != b {
		t.Error("processMetrics made two sets of collectors for the default registry")
	}
}

// The webhook's metrics are served at :9090/metrics by the server knative's
// sharedmain starts (config-observability's metrics-protocol: prometheus),
// which serves client_golang's default registry: there they sit beside
// knative's own OpenTelemetry metrics (the Go runtime's, its work queues',
// client-go's), which its exporter registers on the same registry. Set up as
// sharedmain does, the registry gathers both without a clash.
func TestMetricsServedBesideKnatives(t *testing.T) {
	exp, err := otelprom.New(otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	if err := otelruntime.Start(otelruntime.WithMeterProvider(mp)); err != nil {
		t.Fatal(err)
	}
	m := processMetrics()
	m.record(admission.Mutated, admission.ReasonHold)
	m.duration.Observe(0.001)
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatalf("gathering the default registry: %v", err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{MetricAdmissions, MetricAdmissionDuration, "go_goroutines", "process_cpu_seconds_total", "go_memory_used_bytes"} {
		if !names[want] {
			t.Errorf("%s not served; the registry has %v", want, names)
		}
	}
}
