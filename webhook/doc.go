// Package webhook is istio-aux's mutating admission webhook for pods, built
// on knative.dev/pkg. At pod CREATE it makes the app of an opted-in pod wait
// for its Istio proxy (mode hold) or asks Istio for a native sidecar (mode
// native). It never rejects a pod: anything it does not understand is let
// through unchanged with an admission warning.
//
// It reads like knative.dev/pkg's webhook/configmaps with its pure part
// apart: package admission decides and patches (Mutate, Admit; the proxy
// config's YAML in package proxyconfig) with no controller, informer or
// server, so the kubectl plugin explains a pod with the webhook's own code;
// this package counts and logs each admission (Review), keeps the
// MutatingWebhookConfiguration's caBundle, rules and defaults current (a
// leader-aware reconciler, NewController), and serves the API server over
// HTTPS, bounded in what it holds at once; knative's sharedmain runs the rest.
package webhook
