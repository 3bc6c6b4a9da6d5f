package webhook

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MetricAdmissions is the admissions counter's OpenTelemetry name; knative's
// Prometheus exporter serves it as istio_aux_webhook_admissions_total.
const MetricAdmissions = "istio_aux.webhook.admissions"

// metrics counts admissions. It uses OpenTelemetry, like knative.dev/pkg's
// own webhook metrics, so the component's config-observability decides the
// export (metrics-protocol: prometheus serves them on :9090/metrics).
type metrics struct {
	admissions metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider) *metrics {
	meter := mp.Meter("github.com/istio-aux/istio-aux/webhook")
	// The only error is an invalid instrument name, which is a constant here;
	// the returned no-op counter keeps admission working regardless.
	c, _ := meter.Int64Counter(MetricAdmissions,
		metric.WithDescription("Pod admissions by outcome (mutated, skipped, warned) and reason"),
		metric.WithUnit("{admission}"))
	return &metrics{admissions: c}
}

func (m *metrics) record(ctx context.Context, o Outcome, reason string) {
	m.admissions.Add(ctx, 1, metric.WithAttributes(
		attribute.String("outcome", string(o)),
		attribute.String("reason", reason),
	))
}
