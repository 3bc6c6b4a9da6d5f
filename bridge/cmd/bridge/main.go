// Command bridge watches pods and publishes their events to NATS JetStream,
// and/or dispatches those events to the proxy-quit function at K_SINK
// (ISTIO_AUX_ROLE). With no NATS_URL it embeds a nats-server. It does not
// link the function: bridge/cmd/allinone is the bridge with the function
// in-process.
//
// Unless GOGC is set, the bridge runs with GOGC=50 (Go's default is 100):
// its memory is a long-lived cache of every watched pod, and the default
// lets the heap grow to twice that before collecting. Half the headroom
// costs about 20 CPU-us more per pod update (BenchmarkPipeline at either
// setting), a few percent of a core at a thousand updates a second.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"go.uber.org/zap"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/app"
)

// gcPercent is the bridge's GOGC unless the environment sets one.
const gcPercent = 50

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	z, err := zap.NewProduction()
	if err != nil {
		log.Fatalf("logger: %v", err)
	}
	logger := z.Sugar().Named("istio-aux-bridge")
	defer func() { _ = logger.Sync() }()
	ctx = logging.WithLogger(ctx, logger)

	cfg, err := app.ConfigFromEnv()
	if err != nil {
		logger.Fatalw("Invalid configuration", zap.Error(err))
	}
	logger.Infow("Starting", zap.String("role", string(cfg.Role)), zap.Bool("embeddedNATS", cfg.NATSURL == ""),
		zap.String("sink", cfg.Sink))
	if err := app.Run(ctx, cfg, app.HTTPSink(cfg), nil); err != nil {
		logger.Fatalw("Bridge failed", zap.Error(err))
	}
}
