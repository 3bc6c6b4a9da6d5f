package proxyquit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/internal/serving"
	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// maxRequestBytes bounds a request body: the largest event data Decode
// accepts plus room for a structured-mode envelope. A larger body is refused
// before it is read into memory.
const maxRequestBytes = podevent.MaxDataBytes + 64<<10

// Timeouts of the HTTP server. A delivery takes an exec (ExecTimeout) and a
// few API reads; a caller that sends its request slower than readTimeout
// (a byte every few seconds) is cut off instead of holding a connection.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 15 * time.Second
	writeTimeout      = time.Minute
	idleTimeout       = time.Minute
	maxHeaderBytes    = 16 << 10
)

// NewServer is the function's HTTP server on addr, with the timeouts above.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes}
}

// Serve serves h on l until ctx is done, then shuts down gracefully
// (Knative gives a terminating pod time to finish in-flight requests): it
// returns once the requests under way have been answered, or after
// drainTimeout.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	return serving.Serve(ctx, NewServer(l.Addr().String(), h), l, serving.Stop{Drain: drainTimeout})
}

// drainTimeout bounds how long a stopping function waits for the requests
// under way: an exec (ExecTimeout) and a few API calls, inside a pod's
// default 30 s of grace.
const drainTimeout = 20 * time.Second

// HTTPHandler serves the function on one port, as a Knative Service must:
// CloudEvents (binary or structured) on "/", Prometheus metrics from g on
// "/metrics" and a liveness answer on "/healthz". The logger in ctx is
// handed to every request.
func (f *Function) HTTPHandler(ctx context.Context, g prometheus.Gatherer) http.Handler {
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
	return mux
}

// serveEvent authenticates the caller, decodes one CloudEvent and answers
// with Handle's status. The caller is authenticated from the headers alone,
// before the body is read and before any other API call. The answer's body
// is the outcome only: what the function found out about the pod (whether
// it exists, its uid, its opt-in) is logged, never told to the caller. The
// request is decoded here rather than by the SDK's receiver, which answers
// an undecodable event with 500: Knative delivery and the dispatcher would
// retry that forever, and nothing would log or count it.
func (f *Function) serveEvent(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "CloudEvents are POSTed", http.StatusMethodNotAllowed)
		return
	}
	if caller, err := f.auth.Authenticate(ctx, r); err != nil {
		f.refuse(ctx, w, caller, err)
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
	res := f.handleAndLog(ctx, *event)
	w.WriteHeader(res.code)
	_, _ = w.Write([]byte(res.outcome))
}

// refuse answers a caller that may not deliver events: 401 or 403, or 503
// when its token could not be reviewed (the caller retries). caller is who
// it is, if known for sure. Every refusal is counted; the log is the
// sender's to fill (any pod can get a token for the function's audience,
// and forge one before the keys are read), so a 401 is logged at debug,
// and any other refusal at warn at most once per refusalLogInterval per
// caller and kind (refusalLog), at debug in between.
func (f *Function) refuse(ctx context.Context, w http.ResponseWriter, caller string, err error) {
	code, outcome := http.StatusServiceUnavailable, OutcomeError
	switch {
	case errors.Is(err, ErrUnauthenticated):
		code, outcome = http.StatusUnauthorized, OutcomeUnauthenticated
		w.Header().Set("WWW-Authenticate", `Bearer realm="istio-aux-proxyquit"`)
	case errors.Is(err, ErrForbidden):
		code, outcome = http.StatusForbidden, OutcomeForbidden
	}
	f.metrics.events.WithLabelValues(typeLabel(""), string(outcome)).Inc()
	logger := logging.FromContext(ctx)
	fields := []any{zap.Int("code", code), zap.Error(err)}
	if caller != "" {
		fields = append(fields, zap.String("caller", caller))
	}
	if code == http.StatusUnauthorized {
		logger.Debugw("Refused a caller", fields...)
	} else if warn, unlogged := f.auth.refusals.admit(refusalKey(code, caller, err)); warn {
		logger.Warnw("Refused a caller (a warning a minute at most for each caller; istio_aux_proxyquit_events_total counts every one)",
			append(fields, zap.Int("refusedSinceLastWarning", unlogged))...)
	} else {
		logger.Debugw("Refused a caller", fields...)
	}
	http.Error(w, string(outcome), code)
}

// refusalKey is what refusals are logged by: the kind of refusal and, for
// a 403, the caller when it is known for sure. Unverified subjects share
// one key: their sender chooses them.
func refusalKey(code int, caller string, err error) string {
	switch {
	case code == http.StatusForbidden && caller != "":
		return "forbidden " + caller
	case code == http.StatusForbidden:
		return "forbidden, unverified"
	case errors.Is(err, errReviewDeferred):
		return "deferred"
	}
	return "error"
}

// Bounds of the refusal log.
const (
	refusalLogInterval = time.Minute
	maxRefusalLogKeys  = 64
)

// refusalLog says which refusals to log at warn: the first of a key, then
// at most one per refusalLogInterval, saying how many went unlogged since.
type refusalLog struct {
	now func() time.Time

	mu   sync.Mutex
	seen map[string]*refusalCount
}

type refusalCount struct {
	next     time.Time // no warning for the key before then
	unlogged int       // refusals since its last warning
}

// admit counts a refusal of key and says whether to warn of it, and how
// many refusals of key went unlogged since the last warning. Past
// maxRefusalLogKeys, keys whose interval is over are forgotten, and new
// ones share one key until there is room.
func (l *refusalLog) admit(key string) (warn bool, unlogged int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	r, ok := l.seen[key]
	if !ok && len(l.seen) >= maxRefusalLogKeys {
		for k, old := range l.seen {
			if !now.Before(old.next) {
				delete(l.seen, k)
			}
		}
		if len(l.seen) >= maxRefusalLogKeys {
			key = "other callers"
			r, ok = l.seen[key]
		}
	}
	if !ok {
		r = &refusalCount{}
		l.seen[key] = r
	}
	if now.Before(r.next) {
		r.unlogged++
		return false, 0
	}
	unlogged, r.unlogged, r.next = r.unlogged, 0, now.Add(refusalLogInterval)
	return true, unlogged
}

// rejectUndecodable answers a request that is not a CloudEvent at all with a
// final 4xx, and logs and counts it like any other invalid event.
func (f *Function) rejectUndecodable(ctx context.Context, w http.ResponseWriter, code int, err error) {
	f.metrics.events.WithLabelValues(typeLabel(""), string(OutcomeInvalid)).Inc()
	logging.FromContext(ctx).Warnw("invalid request", zap.Int("code", code), zap.Error(err))
	http.Error(w, string(OutcomeInvalid), code)
}
