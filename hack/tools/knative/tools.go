//go:build tools

// Package tools pins Knative Serving's five commands: the controller, the
// webhook, the autoscaler, the activator and the queue-proxy. The real
// node's harness (test/knative) runs `ko resolve` of the module's own
// config/core in this directory, so that ko builds them at this version,
// and hack/build-knative.sh compiles them once ahead of it. It is a module
// of its own because knative.dev/serving pulls cert-manager, vegeta and
// cloud keychains into the module graph. v0.50.0 is Knative 1.23, the
// release whose knative.dev/pkg is the one istio-aux's go.mod pins (no
// replace directives needed). v1.17.mod is the same module at Knative 1.17,
// for clusters older than 1.23 starts on.
package tools

import (
	_ "knative.dev/serving/cmd/activator"
	_ "knative.dev/serving/cmd/autoscaler"
	_ "knative.dev/serving/cmd/controller"
	_ "knative.dev/serving/cmd/queue"
	_ "knative.dev/serving/cmd/webhook"
)
