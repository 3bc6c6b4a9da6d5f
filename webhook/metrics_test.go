package webhook

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// With config-observability's metrics-protocol: prometheus, knative exports
// OpenTelemetry through this exporter; this is the name operators scrape.
func TestMetricsPrometheusName(t *testing.T) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)))
	m.record(context.Background(), Mutated, ReasonHold)
	m.record(context.Background(), Mutated, ReasonHold)
	m.record(context.Background(), Warned, ReasonBadProxyConfig)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
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
	if got["mutated"] != 2 || got["warned"] != 1 {
		names := []string{}
		for _, f := range families {
			names = append(names, f.GetName())
		}
		t.Errorf("istio_aux_webhook_admissions_total by outcome = %v; families %v", got, names)
	}
}
