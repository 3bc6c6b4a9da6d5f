//go:build tools

// Package hack pins, through go.mod, the exact library versions istio-aux is
// built and tested with (see ../shared/FACTS.md). knative.dev/pkg in
// particular must stay on its release-1.23 pseudo-version: `@latest` resolves
// to a much older one.
package hack

import (
	_ "github.com/cloudevents/sdk-go/v2"
	_ "github.com/cloudevents/sdk-go/v2/protocol/http"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "go.uber.org/zap"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/remotecommand"
	_ "knative.dev/pkg/injection/sharedmain"
	_ "knative.dev/pkg/reconciler/testing"
	_ "knative.dev/pkg/webhook"
	_ "knative.dev/pkg/webhook/certificates"
	_ "knative.dev/pkg/webhook/testing"
)
