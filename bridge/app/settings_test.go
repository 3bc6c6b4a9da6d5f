package app

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/decision"
)

// recordingSink is an in-process sink that takes the process's settings,
// as the all-in-one's function does.
type recordingSink struct {
	mu  sync.Mutex
	got []settings.Settings
}

func (s *recordingSink) Send(context.Context, cloudevents.Event) cloudevents.Result { return nil }

func (s *recordingSink) SetSettings(v settings.Settings) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, v)
}

func (s *recordingSink) seen() []settings.Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// TestSubscribersFollowTheProcessSettings: a subscriber (the all-in-one's
// function) gets the settings in force when it subscribes and every change
// the process's one follower applies after, the watcher too.
func TestSubscribersFollowTheProcessSettings(t *testing.T) {
	start := settings.Defaults()
	l := newLiveSettings(start)
	s := &recordingSink{}
	l.subscribe(s.SetSettings)
	next := start
	next.Decision = decision.Options{ExtraSidecars: []string{"vault-agent"}}
	l.apply(next)
	got := s.seen()
	if len(got) != 2 || len(got[0].Decision.ExtraSidecars) != 0 || !slices.Equal(got[1].Decision.ExtraSidecars, []string{"vault-agent"}) {
		t.Errorf("the subscriber saw %+v; want the starting settings, then the change", got)
	}
}

// TestRunGivesASettingsSinkItsSettings: Run hands a sink that takes
// settings those the process started with (here the environment's: no
// ConfigMap to follow), so that an in-process function needs no follower of
// its own.
func TestRunGivesASettingsSinkItsSettings(t *testing.T) {
	srv := testenv.StartServer(t)
	s := &recordingSink{}
	cfg := Config{NATSURL: srv.URL(), Stream: "ISTIO_AUX", Role: RoleDispatch, MetricsAddr: "127.0.0.1:0", SinkTimeout: time.Second}
	cfg.Settings = settings.Defaults()
	cfg.Settings.Decision.ExtraSidecars = []string{"fluent-bit"}
	ctx, cancel := context.WithCancel(testenv.Context(t))
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, cfg, nil, func(context.Context, *rest.Config, prometheus.Registerer) (dispatch.Sink, error) { return s, nil }, nil)
	}()
	testenv.Eventually(t, 5*time.Second, "the sink's settings", func() bool { return len(s.seen()) > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if got := s.seen(); !slices.Equal(got[0].Decision.ExtraSidecars, []string{"fluent-bit"}) {
		t.Errorf("the sink was given %+v; want the process's settings", got[0])
	}
}
