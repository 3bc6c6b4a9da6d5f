// Package webhook is istio-aux's mutating admission webhook for pods, built
// on knative.dev/pkg. At pod CREATE it makes the app of an opted-in pod wait
// for its Istio proxy (mode hold) or asks Istio for a native sidecar (mode
// native). It never rejects a pod: anything it does not understand is let
// through unchanged with an admission warning.
//
// The package has three parts: a pure mutation (Mutate, mergeHold), the
// AdmissionController that decodes requests and applies it (Admit), and a
// leader-aware reconciler that keeps the MutatingWebhookConfiguration's
// caBundle, rules and defaults current.
package webhook

import "time"

// Names shared with config/ and the e2e harness.
const (
	// ConfigurationName is the MutatingWebhookConfiguration's name. The API
	// server calls mutating configurations in name order, and this must run
	// before Istio's injector ("istio-sidecar-injector*",
	// "istio-revision-tag-*") so that the injector sees our annotation.
	ConfigurationName = "istio-aux-webhook"
	// Path is where the API server sends pod admission reviews.
	Path = "/mutate-pods"
	// Port is the HTTPS port the webhook serves on.
	Port = 8443
	// SecretName holds the serving certificate (filled by knative's
	// certificates controller; the YAML creates it empty).
	SecretName = "istio-aux-webhook-certs"
	// ConfigMapName is istio-aux's ConfigMap in the system namespace.
	ConfigMapName = "config-istio-aux"
	// DefaultTimeout is the timeoutSeconds set on each webhook when unset:
	// short, because failurePolicy is Ignore and a slow webhook only delays
	// pod creation.
	DefaultTimeout = 5 * time.Second
)

// KeyHold is the ProxyConfig field (in the YAML of keys.AnnotationProxyConfig)
// that makes the injector start istio-proxy first and hold the apps until it
// is ready.
const KeyHold = "holdApplicationUntilProxyStarts"

// KeyHoldProto is the proto spelling of KeyHold. Istio reads ProxyConfig
// with protobuf's JSON rules, which accept both; when both are present the
// camelCase one wins, so adding KeyHold would override a user's choice made
// in this spelling.
const KeyHoldProto = "hold_application_until_proxy_starts"
