// Command allinone is istio-aux's bridge with the proxy-quit function
// linked in: with no NATS_URL it embeds a nats-server, and with no K_SINK
// the dispatcher calls the function in-process. One process then serves a
// cluster with nothing else installed: what `make run` and the end-to-end
// suites use. This is the one place that wires that shape; the deployed
// bridge (bridge/cmd/bridge) never links the function.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/app"
	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/functions/proxyquit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger, _ := zap.NewProduction()
	ctx = logging.WithLogger(ctx, logger.Sugar().Named("istio-aux"))
	cfg, err := app.ConfigFromEnv()
	if err != nil {
		logger.Fatal("Invalid configuration", zap.Error(err))
	}
	fcfg, err := proxyquit.ConfigFromEnv()
	if err != nil {
		logger.Fatal("Invalid function configuration", zap.Error(err))
	}
	fcfg.Decision = cfg.Decision // read once, shared
	sink := func(ctx context.Context, rc *rest.Config, reg prometheus.Registerer) (dispatch.Sink, error) {
		if cfg.Sink != "" {
			return app.HTTPSink(cfg)(ctx, rc, reg)
		}
		if rc == nil {
			return nil, errors.New("the in-process function needs a Kubernetes client configuration")
		}
		fn, err := proxyquit.NewFromConfig(ctx, rc, fcfg, reg)
		if err != nil {
			return nil, err
		}
		return dispatch.SinkFunc(fn.Handle), nil
	}
	if err := app.Run(ctx, cfg, sink, nil); err != nil {
		logger.Fatal("istio-aux stopped", zap.Error(err))
	}
}
