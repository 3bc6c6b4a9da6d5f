package proxyquit

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// Outcomes of one event, the `outcome` label of the events counter. The set
// is closed so the metric's cardinality stays small.
const (
	OutcomeInvalid     = "invalid"      // 400: the event can never be handled
	OutcomeIgnored     = "ignored"      // 200: not ours, or nothing left to do
	OutcomeWait        = "wait"         // 200: apps not done; a later event will come
	OutcomeQuit        = "quit"         // 200: the quit command ran
	OutcomeFailed      = "failed"       // 500: the quit command failed; retried
	OutcomeGone        = "gone"         // 200: the pod is gone, or its proxy exited under a failed exec
	OutcomeUIDMismatch = "uid_mismatch" // 200: the name now belongs to another pod
	OutcomeNotOptedIn  = "not_opted_in" // 200: the live pod is not opted in
	OutcomeError       = "error"        // 503: the API server could not answer; retried
	// HTTP only: callers that may not deliver events.
	OutcomeUnauthenticated = "unauthenticated" // 401: no token, or one not valid for the audience
	OutcomeForbidden       = "forbidden"       // 403: a valid token of a caller that is not allowed
)

// Metrics are the function's Prometheus collectors, all prefixed
// istio_aux_proxyquit_.
type Metrics struct {
	events       *prometheus.CounterVec
	execDuration *prometheus.HistogramVec
	execFailures prometheus.Counter
}

// NewMetrics creates the collectors and registers them on reg (nil: not
// registered, which tests and benchmarks use).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_proxyquit_events_total",
			Help: "Pod events handled, by CloudEvent type and outcome.",
		}, []string{"type", "outcome"}),
		execDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "istio_aux_proxyquit_exec_duration_seconds",
			Help: "Time to exec the quit command in istio-proxy, by result (ok or error).",
			// A local exec takes tens of milliseconds; the default timeout is 10 s.
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"result"}),
		execFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_proxyquit_exec_failures_total",
			Help: "Quit commands that failed while istio-proxy was still running (each is retried).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.events, m.execDuration, m.execFailures} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if errors.As(err, &already) {
				return nil, fmt.Errorf("proxyquit metrics already registered (one Function per registry): %w", err)
			}
			return nil, fmt.Errorf("registering proxyquit metrics: %w", err)
		}
	}
	return m, nil
}

// typeLabel bounds the type label: anything outside the contract counts as
// "other", so garbage events cannot grow the metric.
func typeLabel(t string) string {
	if podevent.Accepted(t) {
		return t
	}
	return "other"
}
