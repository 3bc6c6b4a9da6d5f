//go:build tools

// Package tools pins Traefik, the real node's Knative networking layer: its
// Knative provider implements KIngress (class
// traefik.ingress.networking.knative.dev), so that a Knative Service's
// Route becomes Ready and its cluster-local address routes. It is the only
// KIngress implementation that builds here: knative.dev/net-* are refused by
// the module proxy and the others need Envoy. v3.6.12, not 3.7.x: 3.7's
// dependencies include modules the proxy refuses (its own go-http-auth fork
// among them). A module of its own: it needs its forks as replace
// directives (copied from Traefik's go.mod) and older k8s.io and Knative
// modules than istio-aux's.
package tools

import _ "github.com/traefik/traefik/v3/cmd/traefik"
