// Package proxyquit is istio-aux's proxy-quit function: a stateless
// CloudEvent handler (the knative func "instanced" shape) that, given an
// event naming a pod, re-reads the live pod and, when every app container is
// done for good, execs the quit command in its istio-proxy container.
//
// The event only says which pod to look at; the live pod is the truth. Every
// step is idempotent, so duplicate, late and redelivered events are harmless.
// The pod is read live for every event; its namespace (which only says
// whether the pod is opted in) is reused for up to NamespaceTTL, so a burst
// of finishing Jobs in one namespace costs one namespace read.
//
// The bridge calls Handle in-process when no K_SINK is set; cmd/proxyquit
// serves it over HTTP for Knative Serving.
package proxyquit
