package webhook

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/istio-aux/istio-aux/internal/version"
	"github.com/istio-aux/istio-aux/webhook/admission"
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

// processMetrics are the webhook's metrics on the default registry, which
// knative's sharedmain serves: that registry is the process's, so they are
// made once for it however many controllers the process builds.
var processMetrics = sync.OnceValue(func() *metrics {
	version.Register(prometheus.DefaultRegisterer, "webhook")
	return newMetrics(prometheus.DefaultRegisterer)
})

// newMetrics registers the webhook's metrics on reg, which must not have
// them yet.
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
	reg.MustRegister(m.admissions, m.duration)
	return m
}

// RegisterMetrics registers the webhook's metrics on reg, as its controller
// does on the default registry: for what lists every component's metrics
// (docs.Registered).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }

func (m *metrics) record(o admission.Outcome, reason string) {
	m.admissions.WithLabelValues(string(o), reason).Inc()
}
