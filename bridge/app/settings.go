package app

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/internal/kube"
	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// followWait bounds how long the bridge waits for config-istio-aux's first
// read before it starts with the environment's settings (a missing grant
// must not keep it from starting; the settings then apply when read).
const followWait = 5 * time.Second

// liveSettings are the settings in force and the watcher running (while
// this replica leads), which is made with them and given every change.
type liveSettings struct {
	mu      sync.Mutex
	s       settings.Settings
	watcher *watch.Watcher
}

func newLiveSettings(s settings.Settings) *liveSettings { return &liveSettings{s: s} }

// start makes the term's watcher with the settings in force, under the
// lock, so that no change falls between its making and its registration.
func (l *liveSettings) start(build func(settings.Settings) *watch.Watcher) *watch.Watcher {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watcher = build(l.s)
	return l.watcher
}

// stop ends the term: no watcher runs.
func (l *liveSettings) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watcher = nil
}

// running is the watcher of this term, nil while standing by.
func (l *liveSettings) running() *watch.Watcher {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.watcher
}

func (l *liveSettings) apply(s settings.Settings) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.s = s
	if l.watcher != nil {
		l.watcher.Reconfigure(s.Decision, s.Resync)
	}
}

// follow keeps l current with ConfigMap config-istio-aux until ctx is done.
// A change of nats-url ends the process through restart when NATS_URL
// comes from the environment (config/ sets it from that key; the
// all-in-one's embedded server has none). Events go on the ConfigMap.
func (l *liveSettings) follow(ctx context.Context, cfg Config, client *kube.Client, recorder record.EventRecorder, restart context.CancelCauseFunc) {
	f := &settings.Follower{
		Component: names.SourceBridge,
		Base:      cfg.Settings,
		Apply:     l.apply,
		Recorder:  recorder,
	}
	if cfg.NATSURLSet {
		f.Restart = func(string) { restart(settings.ErrRestart) }
	}
	synced := f.Start(ctx, client, cfg.SystemNamespace)
	wctx, cancel := context.WithTimeout(ctx, followWait)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), synced) && ctx.Err() == nil {
		logging.FromContext(ctx).Warnw("ConfigMap config-istio-aux not read yet; starting with the environment's settings until it is",
			zap.String("namespace", cfg.SystemNamespace))
	}
}
