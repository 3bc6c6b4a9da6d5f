package webhook

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricAdmissions counts admissions by outcome and reason. The name is the
// one the OpenTelemetry counter it replaces was served under (docs/metrics.md).
const MetricAdmissions = "istio_aux_webhook_admissions_total"

// MetricAdmissionDuration is how long each AdmissionReview took, from its
// arrival to the answer, the wait for a share of the review budget included.
const MetricAdmissionDuration = "istio_aux_webhook_admission_duration_seconds"

// metrics are the webhook's Prometheus metrics, registered like the bridge's
// and the function's (client_golang; the reason is in docs/metrics.md).
type metrics struct {
	admissions *prometheus.CounterVec
	duration   prometheus.Histogram
}

// newMetrics registers the webhook's metrics on reg. A registry that already
// has them (NewController runs once per test on the default registry) lends
// its own, so one process counts in one place.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricAdmissions,
			Help: "Pod admissions by outcome (mutated, skipped, warned, invalid) and reason.",
		}, []string{"outcome", "reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricAdmissionDuration,
			Help:    "Time from an AdmissionReview's arrival to its answer, in seconds.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		}),
	}
	m.admissions = register(reg, m.admissions)
	m.duration = register(reg, m.duration)
	return m
}

// RegisterMetrics registers the webhook's metrics on reg, as its controller
// does on the default registry: for what lists every component's metrics
// (docs.Registered).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }

// register registers c on reg and returns it, or the collector reg already
// has under its name.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing
		}
	}
	return c
}

func (m *metrics) record(o Outcome, reason string) {
	m.admissions.WithLabelValues(string(o), reason).Inc()
}
