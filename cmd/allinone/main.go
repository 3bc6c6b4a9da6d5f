// Command allinone is istio-aux's bridge with the proxy-quit function
// linked in: with no NATS_URL it embeds a nats-server, and with no K_SINK
// the dispatcher calls the function in-process. One process then serves a
// cluster with nothing else installed: what `make run` and the end-to-end
// suites use. This is the one place that wires that shape; the deployed
// bridge (bridge/cmd/bridge) never links the function.
package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	knlogging "knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/app"
	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/internal/startup"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// functionSink is the in-process function as the dispatcher's sink, taking
// the process's settings (app.SettingsSink).
type functionSink struct {
	dispatch.SinkFunc
	fn *proxyquit.Function
}

func (s functionSink) SetSettings(v settings.Settings) { s.fn.SetSettings(v) }

func main() {
	ctx := startup.Context(0)
	cfg, cfgErr := app.ConfigFromEnv()
	fcfg, fnErr := proxyquit.ConfigFromEnv()
	// Read once, shared: the function starts with the bridge's settings and
	// follows no ConfigMap of its own; Run gives it the process's one
	// follower's changes (app.SettingsSink).
	fcfg.Settings, fcfg.SystemNamespace = cfg.Settings, ""
	rc, rcErr := app.RESTConfig(cfg)
	logger := startup.Logger(ctx, rc, names.SourceBridge, cfgErr, fnErr, rcErr)
	var fn *proxyquit.Function
	inProcess := func(ctx context.Context, rc *rest.Config, reg prometheus.Registerer) (dispatch.Sink, error) {
		if cfg.Sink != "" {
			return app.HTTPSink(cfg)(ctx, rc, reg)
		}
		var err error
		if fn, err = proxyquit.NewFromConfig(ctx, rc, fcfg, reg); err != nil {
			return nil, err
		}
		return functionSink{dispatch.SinkFunc(fn.Handle), fn}, nil
	}
	err := app.Run(knlogging.WithLogger(ctx, logger), cfg, rc, inProcess)
	if fn != nil {
		fn.Close(ctx) // the dispatcher has drained: write its quits' Events
	}
	startup.Exit(logger, "istio-aux stopped", err)
}
