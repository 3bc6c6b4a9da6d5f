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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
	knlogging "knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/app"
	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/internal/logging"
	"github.com/istio-aux/istio-aux/internal/startup"
)

func main() {
	ctx := startup.Context(0)
	cfg, cfgErr := app.ConfigFromEnv()
	fcfg, fnErr := proxyquit.ConfigFromEnv()
	fcfg.Decision = cfg.Decision // read once, shared
	rc, rcErr := app.RESTConfig(cfg)
	logger := logging.New(ctx, rc, app.Component)
	if err := errors.Join(cfgErr, fnErr, rcErr); err != nil {
		startup.Exit(logger, "Invalid configuration", err)
	}
	var fn *proxyquit.Function
	inProcess := func(ctx context.Context, rc *rest.Config, reg prometheus.Registerer) (dispatch.Sink, error) {
		if cfg.Sink != "" {
			return app.HTTPSink(cfg)(ctx, rc, reg)
		}
		var err error
		if fn, err = proxyquit.NewFromConfig(ctx, rc, fcfg, reg); err != nil {
			return nil, err
		}
		return dispatch.SinkFunc(fn.Handle), nil
	}
	err := app.Run(knlogging.WithLogger(ctx, logger), cfg, rc, inProcess)
	if fn != nil {
		// The dispatcher has drained: write the Events of the quits it
		// made before the process ends.
		closing, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventsTimeout)
		if cerr := fn.Close(closing); cerr != nil {
			logger.Warnw("Stopping", zap.Error(cerr))
		}
		cancel()
	}
	startup.Exit(logger, "istio-aux stopped", err)
}

// eventsTimeout bounds the wait for the last Kubernetes Events, after the
// dispatcher's drain, inside a pod's default 30 s of grace.
const eventsTimeout = 5 * time.Second
