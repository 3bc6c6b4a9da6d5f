// Package serving runs the HTTP servers of istio-aux's components alike:
// the webhook's admission server, the bridge's metrics and health server
// and the function's CloudEvents server each serve until their context
// ends, then stop taking connections, let the requests under way finish
// within a bound the pod's grace allows, and return once they have.
package serving

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Stop says how a server stops once its context ends.
type Stop struct {
	// Quiet, if set, runs first, while the server still answers: the
	// webhook's drainer fails readiness and waits for the endpoints to
	// drop the pod (knative.dev/pkg's handlers.Drainer).
	Quiet func()
	// Drain bounds the wait for the requests under way; past it they are
	// cut off. 0 waits for them.
	Drain time.Duration
}

// Serve serves srv on l until ctx is done, then stops as stop says. It
// returns nil after a graceful stop, and the server's error if it failed.
func Serve(ctx context.Context, srv *http.Server, l net.Listener, stop Stop) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	if stop.Quiet != nil {
		stop.Quiet()
	}
	sctx := context.WithoutCancel(ctx)
	if stop.Drain > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(sctx, stop.Drain)
		defer cancel()
	}
	err := srv.Shutdown(sctx)
	// Serve returns http.ErrServerClosed as soon as Shutdown began.
	if served := <-errc; err == nil && !errors.Is(served, http.ErrServerClosed) {
		err = served
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// Past the bound: what was still running is cut off, as meant.
		_ = srv.Close()
		return nil
	}
	return err
}
