package dispatch

import (
	"context"
	"fmt"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/istio-aux/istio-aux/bridge/transport"
)

// Sink delivers one event and reports the outcome the Knative way: nil or a
// 2xx cehttp.Result is done, 4xx is invalid, 5xx (or no answer) is retry.
type Sink interface {
	Send(ctx context.Context, e cloudevents.Event) cloudevents.Result
}

// SinkFunc adapts a function, such as proxyquit.Function.Handle, to Sink:
// the in-process sink.
type SinkFunc func(ctx context.Context, e cloudevents.Event) cloudevents.Result

// Send calls f.
func (f SinkFunc) Send(ctx context.Context, e cloudevents.Event) cloudevents.Result { return f(ctx, e) }

// HTTPSink POSTs events in binary mode to a URL (K_SINK).
type HTTPSink struct {
	client  cloudevents.Client
	target  string
	timeout time.Duration
}

// NewHTTPSink returns a sink for target whose requests give up after
// timeout. With a tokenFile, every request carries the token in it as a
// bearer token (the function authenticates its callers).
func NewHTTPSink(target string, timeout time.Duration, tokenFile string) (*HTTPSink, error) {
	// The function's pods come and go with their nodes: a connection
	// kube-proxy sends to one that died is given up on within seconds and
	// tried again (another pod, most likely), one already open is closed
	// within seconds, and the function's name still resolves while the
	// cluster DNS loses queries to a dead node (transport.Dialer).
	c, err := newCEClient(transport.NewDialer().WithServiceRetries(), timeout, tokenFile)
	if err != nil {
		return nil, fmt.Errorf("http sink: %w", err)
	}
	return &HTTPSink{client: c, target: target, timeout: timeout}, nil
}

// Send POSTs e. Binary mode is the sdk's default for HTTP.
func (s *HTTPSink) Send(ctx context.Context, e cloudevents.Event) cloudevents.Result {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.client.Send(cloudevents.ContextWithTarget(ctx, s.target), e)
}
