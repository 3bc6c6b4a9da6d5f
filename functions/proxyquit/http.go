package proxyquit

import (
	"context"
	"fmt"
	"net/http"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"knative.dev/pkg/logging"
)

// HTTPHandler serves the function on one port, as a Knative Service must:
// CloudEvents (binary or structured) on "/", Prometheus metrics from g on
// "/metrics" and a liveness answer on "/healthz". The logger in ctx is
// handed to every request.
func (f *Function) HTTPHandler(ctx context.Context, g prometheus.Gatherer) (http.Handler, error) {
	p, err := cloudevents.NewHTTP()
	if err != nil {
		return nil, fmt.Errorf("creating the CloudEvents HTTP protocol: %w", err)
	}
	receiver, err := cloudevents.NewHTTPReceiveHandler(ctx, p, f.Handle)
	if err != nil {
		return nil, fmt.Errorf("creating the CloudEvents receiver: %w", err)
	}
	logger := logging.FromContext(ctx)
	mux := http.NewServeMux()
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		receiver.ServeHTTP(w, r.WithContext(logging.WithLogger(r.Context(), logger)))
	}))
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Stateless: if the process serves HTTP it can handle events.
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok"))
	})
	return mux, nil
}
