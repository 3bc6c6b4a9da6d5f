// Command bridge watches pods and publishes their events to NATS JetStream,
// and/or dispatches those events to the proxy-quit function at K_SINK
// (ISTIO_AUX_ROLE). With no NATS_URL it embeds a nats-server. It does not
// link the function: cmd/allinone is the bridge with the function
// in-process. Its environment is app.Config's.
//
// Unless GOGC is set, the bridge runs with GOGC=50 (Go's default is 100):
// its memory is a long-lived cache of every watched pod, and the default
// lets the heap grow to twice that before collecting; the CPU it costs per
// update is BenchmarkPipeline's (make bench, docs/bench.md).
package main

import (
	"go.uber.org/zap"
	knlogging "knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/app"
	"github.com/istio-aux/istio-aux/internal/startup"
	"github.com/istio-aux/istio-aux/pkg/names"
)

func main() {
	ctx := startup.Context(50)
	cfg, cfgErr := app.ConfigFromEnv()
	rc, rcErr := app.RESTConfig(cfg)
	logger := startup.Logger(ctx, rc, names.SourceBridge, cfgErr, rcErr)
	logger.Infow("Starting", zap.String("role", string(cfg.Role)), zap.Bool("embeddedNATS", cfg.NATSURL == ""), zap.String("sink", cfg.Sink))
	startup.Exit(logger, "Bridge failed", app.Run(knlogging.WithLogger(ctx, logger), cfg, rc, app.HTTPSink(cfg)))
}
