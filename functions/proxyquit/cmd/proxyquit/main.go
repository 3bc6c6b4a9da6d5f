// Command proxyquit serves istio-aux's proxy-quit function over HTTP, as a
// Knative Service (or any HTTP CloudEvents sink). Configuration is the
// environment: PORT (8080), KUBECONFIG (in-cluster otherwise),
// SYSTEM_NAMESPACE (where config-logging is), and the ISTIO_AUX_* variables
// of proxyquit.ConfigFromEnv.
package main

import (
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"k8s.io/client-go/tools/clientcmd"
	knlogging "knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/internal/env"
	"github.com/istio-aux/istio-aux/internal/startup"
	"github.com/istio-aux/istio-aux/internal/version"
	"github.com/istio-aux/istio-aux/pkg/names"
)

func main() {
	ctx := startup.Context(0)
	cfg, cfgErr := proxyquit.ConfigFromEnv()
	rc, rcErr := clientcmd.BuildConfigFromFlags("", env.Kubeconfig.Get()) // empty: in-cluster
	logger := startup.Logger(ctx, rc, names.SourceProxyQuit, cfgErr, rcErr)
	ctx = knlogging.WithLogger(ctx, logger)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	version.Register(reg, "proxyquit")
	fn, err := proxyquit.NewFromConfig(ctx, rc, cfg, reg)
	if err != nil {
		startup.Exit(logger, "Creating the function", err)
	}
	l, err := net.Listen("tcp", ":"+env.Port.Get())
	if err != nil {
		startup.Exit(logger, "Listening", err)
	}
	logger.Infow("Serving", zap.Stringer("addr", l.Addr()), zap.Strings("quitCommand", cfg.Settings.QuitCommand), zap.Bool("auth", !cfg.Auth.Disabled))
	err = proxyquit.Serve(ctx, l, fn.HTTPHandler(ctx, reg))
	fn.Close(ctx) // the requests are answered, their Events written: wait for those the drain cut off
	startup.Exit(logger, "proxyquit stopped", err)
}
