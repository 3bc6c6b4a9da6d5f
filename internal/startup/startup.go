// Package startup is what every istio-aux command does first and last, so
// that the webhook, the bridge and the proxy-quit function start and stop
// alike: the garbage collector's target, the context a command runs in, and
// a logger flushed (or a fatal error logged) on the way out.
package startup

import (
	"context"
	"errors"
	"runtime/debug"

	"go.uber.org/zap"
	"k8s.io/client-go/rest"
	"knative.dev/pkg/signals"

	"github.com/istio-aux/istio-aux/internal/env"
	"github.com/istio-aux/istio-aux/internal/logging"
	"github.com/istio-aux/istio-aux/internal/settings"
)

// Context returns the context a command runs in, cancelled on SIGTERM or
// SIGINT; a second signal exits at once (knative.dev/pkg's signals, which
// the webhook's sharedmain has always used). Before that it sets the garbage
// collector's target to gcPercent, unless the GOGC environment variable
// says otherwise; 0 keeps Go's default (100). Call it once, first thing in
// main.
func Context(gcPercent int) context.Context {
	if _, set := env.GOGC.In(env.OS); !set && gcPercent > 0 {
		debug.SetGCPercent(gcPercent)
	}
	return signals.NewContext()
}

// Logger returns the component's logger (internal/logging, configured from
// the cluster rc points at) once a command has read its configuration, and
// exits through Exit when reading it failed: errs are the configuration's
// errors, nil ones ignored, all of them logged.
func Logger(ctx context.Context, rc *rest.Config, component string, errs ...error) *zap.SugaredLogger {
	logger := logging.New(ctx, rc, component)
	if err := errors.Join(errs...); err != nil {
		Exit(logger, "Invalid configuration", err)
	}
	return logger
}

// Exit ends a command: with an error it logs msg and err and exits with
// status 1 (zap flushes fatal lines); without one it flushes the logger. A
// process stopping to start again (settings.ErrRestart: its nats-url
// changed) is no failure: the kubelet starts the container again, with
// NATS_URL read anew.
func Exit(logger *zap.SugaredLogger, msg string, err error) {
	if errors.Is(err, settings.ErrRestart) {
		logger.Infow("Stopping to start again", zap.Error(err))
		err = nil
	}
	if err != nil {
		logger.Fatalw(msg, zap.Error(err))
	}
	_ = logger.Sync()
}
