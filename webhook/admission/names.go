// Package webhook is istio-aux's mutating admission webhook for pods, built
// on knative.dev/pkg. At pod CREATE it makes the app of an opted-in pod wait
// for its Istio proxy (mode hold) or asks Istio for a native sidecar (mode
// native). It never rejects a pod: anything it does not understand is let
// through unchanged with an admission warning.
//
// It reads like knative.dev/pkg's webhook/configmaps: a pure mutation
// (Mutate, with the proxy config's YAML in package proxyconfig), the
// admission that decodes a review and applies it (Review, Admit), and a
// leader-aware reconciler that keeps the MutatingWebhookConfiguration's
// caBundle, rules and defaults current (NewController). Its own HTTPS Server
// answers the API server, bounded in what it holds at once; knative's
// sharedmain runs the rest.
package webhook

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
