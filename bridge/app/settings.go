package app

import (
	"context"
	"sync"

	"k8s.io/client-go/tools/record"

	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/internal/kube"
	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// liveSettings are the settings in force and the watcher running (while
// this replica leads), which is made with them and given every change; and
// whoever else in the process takes them (the all-in-one's in-process
// function: one follower per process).
type liveSettings struct {
	mu          sync.Mutex
	s           settings.Settings
	watcher     *watch.Watcher
	subscribers []func(settings.Settings)
}

// subscribe gives set the settings in force now, and every change after.
func (l *liveSettings) subscribe(set func(settings.Settings)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.subscribers = append(l.subscribers, set)
	set(l.s)
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
	for _, set := range l.subscribers {
		set(s)
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
	f.Follow(ctx, client, cfg.SystemNamespace)
}
