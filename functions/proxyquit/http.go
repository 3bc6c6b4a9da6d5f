package proxyquit

import (
	"context"
	"errors"
	"net/http"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// maxRequestBytes bounds a request body: the largest event data Decode
// accepts plus room for a structured-mode envelope. A larger body is refused
// before it is read into memory.
const maxRequestBytes = podevent.MaxDataBytes + 64<<10

// HTTPHandler serves the function on one port, as a Knative Service must:
// CloudEvents (binary or structured) on "/", Prometheus metrics from g on
// "/metrics" and a liveness answer on "/healthz". The logger in ctx is
// handed to every request.
func (f *Function) HTTPHandler(ctx context.Context, g prometheus.Gatherer) (http.Handler, error) {
	logger := logging.FromContext(ctx)
	mux := http.NewServeMux()
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.serveEvent(w, r.WithContext(logging.WithLogger(r.Context(), logger)))
	}))
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Stateless: if the process serves HTTP it can handle events.
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok"))
	})
	return mux, nil
}

// serveEvent decodes one CloudEvent and answers with Handle's status. It
// decodes the request itself rather than through the SDK's receiver, which
// answers an undecodable event with 500: Knative delivery and the dispatcher
// would retry that forever, and nothing would log or count it.
func (f *Function) serveEvent(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "CloudEvents are POSTed", http.StatusMethodNotAllowed)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBytes)
	msg := cehttp.NewMessageFromHttpRequest(r)
	defer func() { _ = msg.Finish(nil) }()

	if msg.ReadEncoding() == binding.EncodingUnknown {
		f.rejectUndecodable(ctx, w, http.StatusUnsupportedMediaType,
			errors.New("not a CloudEvent: no ce-specversion header and not application/cloudevents+json"))
		return
	}
	event, err := binding.ToEvent(ctx, msg)
	if err != nil {
		code := http.StatusBadRequest
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			code = http.StatusRequestEntityTooLarge
		}
		f.rejectUndecodable(ctx, w, code, err)
		return
	}

	code, text := http.StatusOK, ""
	if res := f.Handle(ctx, *event); res != nil {
		text = res.Error()
		var hr *cehttp.Result
		if cloudevents.ResultAs(res, &hr) {
			code = hr.StatusCode
		} else if !cloudevents.IsACK(res) {
			code = http.StatusInternalServerError
		}
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(text))
}

// rejectUndecodable answers a request that is not a CloudEvent at all with a
// final 4xx, and logs and counts it like any other invalid event.
func (f *Function) rejectUndecodable(ctx context.Context, w http.ResponseWriter, code int, err error) {
	f.metrics.events.WithLabelValues(typeLabel(""), OutcomeInvalid).Inc()
	logging.FromContext(ctx).Warnw("invalid request", zap.Int("code", code), zap.Error(err))
	http.Error(w, "invalid event: "+err.Error(), code)
}
