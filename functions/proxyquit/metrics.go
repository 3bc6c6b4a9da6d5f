package proxyquit

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// Metrics are the function's Prometheus collectors, all prefixed
// istio_aux_proxyquit_.
type Metrics struct {
	events       *prometheus.CounterVec
	execDuration *prometheus.HistogramVec
	execFailures prometheus.Counter
	// finalFailures counts quits that failed for good, by reason (the
	// names.Final* constants).
	finalFailures *prometheus.CounterVec
	// beyondBounds counts events whose pod is beyond the event's bounds,
	// by action: live (named only, decided on the live pod) or refused.
	beyondBounds *prometheus.CounterVec
	// tokenReviews counts the reviews of callers' tokens, by result
	// (the review* constants).
	tokenReviews *prometheus.CounterVec
	// eventsUnwritten counts the Kubernetes Events given up, by their
	// reason and the cause (the unwritten* constants), and the ProxyQuit
	// Events of failed quits that could not be deleted (unwrittenUndeleted).
	eventsUnwritten *prometheus.CounterVec
}

// Results of a token review (tokenReviews).
const (
	reviewAccepted = "accepted" // the API server honours the token for the function's audience
	reviewRefused  = "refused"  // it does not (revoked, another audience)
	reviewError    = "error"    // no answer
	// reviewDeferred: not made: the cluster's keys are not read yet and
	// the budget of reviews of unverified tokens is spent (503).
	reviewDeferred = "deferred"
)

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
			Help: "Quit commands that failed while istio-proxy was still running.",
		}),
		finalFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_proxyquit_final_failures_total",
			Help: "Quits that failed for good (not retried until the pod changes), by reason: denied, rejected, exit_code, not_found.",
		}, []string{"reason"}),
		beyondBounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_proxyquit_beyond_bounds_total",
			Help: "Events whose pod is beyond the event's bounds (more than 256 containers), by action: live (the event names the pod, which is decided live) or refused (400, with a Warning Event on the pod).",
		}, []string{"action"}),
		tokenReviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_proxyquit_token_reviews_total",
			Help: "TokenReviews of callers' tokens, by result: accepted, refused, error, or deferred (not made: the cluster's token keys are not read yet and the budget of reviews of unverified tokens is spent; answered 503).",
		}, []string{"result"}),
		eventsUnwritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_proxyquit_events_unwritten_total",
			Help: "Kubernetes Events (not CloudEvents) the function gave up writing, each also logged with its pod's name, by the Event's reason (ProxyQuit: a quit not made, answered 503 to be delivered again, as its record could not be written first) and cause: timeout (the API server slow or failing past the write's deadline), rejected (refused for good: RBAC, a namespace being deleted), shutdown (the process stopped first), undeleted (a ProxyQuit Event written before a quit that then failed, which could not be deleted: it stays on the pod).",
		}, []string{"reason", "cause"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.events, m.execDuration, m.execFailures, m.finalFailures, m.beyondBounds, m.tokenReviews, m.eventsUnwritten} {
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
