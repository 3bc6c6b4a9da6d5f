package admission

import "time"

// The webhook's own names. Those of the objects it shares with config/ and
// kubectl istio-aux (its MutatingWebhookConfiguration, its Secret, the
// ConfigMap) are pkg/names'.
const (
	// Path is where the API server sends pod admission reviews.
	Path = "/mutate-pods"
	// Port is the HTTPS port the webhook serves on.
	Port = 8443
	// DefaultTimeout is the timeoutSeconds set on each webhook when unset:
	// short, because a request to a replica on a dead node gets no answer,
	// and the pod's controller creates it again sooner. Admit answers in
	// microseconds.
	DefaultTimeout = 3 * time.Second
)
