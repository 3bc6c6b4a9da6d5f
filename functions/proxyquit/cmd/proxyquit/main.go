// Command proxyquit serves istio-aux's proxy-quit function over HTTP, as a
// Knative Service (or any HTTP CloudEvents sink). Configuration is the
// environment: PORT (8080), KUBECONFIG (in-cluster otherwise),
// ISTIO_AUX_SIDECARS, ISTIO_AUX_QUIT_COMMAND, ISTIO_AUX_EXEC_TIMEOUT.
package main

import (
	"cmp"
	"context"
	"errors"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"k8s.io/client-go/tools/clientcmd"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/functions/proxyquit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	zl, err := zap.NewProduction()
	if err != nil {
		log.Fatalf("creating the logger: %v", err)
	}
	logger := zl.Sugar().Named(proxyquit.Component)
	ctx = logging.WithLogger(ctx, logger)
	if err := run(ctx); err != nil {
		logger.Fatalw("proxyquit stopped", zap.Error(err))
	}
}

func run(ctx context.Context) error {
	cfg, err := proxyquit.ConfigFromEnv()
	if err != nil {
		return err
	}
	// Empty KUBECONFIG falls back to the in-cluster configuration.
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fn, err := proxyquit.NewFromConfig(ctx, rc, cfg, reg)
	if err != nil {
		return err
	}
	h, err := fn.HTTPHandler(ctx, reg)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: ":" + cmp.Or(os.Getenv("PORT"), "8080"), Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		// Knative gives a terminating pod time to finish in-flight requests.
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	logging.FromContext(ctx).Infow("serving", zap.String("addr", srv.Addr), zap.Strings("quitCommand", cfg.QuitCommand))
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
