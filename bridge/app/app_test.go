package app

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/publish"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

func TestConfigFromLookup(t *testing.T) {
	cases := map[string]struct {
		env     map[string]string
		check   func(Config) bool
		wantErr bool
	}{
		"defaults": {env: map[string]string{"SYSTEM_NAMESPACE": "istio-aux"}, check: func(c Config) bool {
			return c.Role == RoleAll && c.Stream == "ISTIO_AUX" && c.Settings.Resync == 5*time.Minute &&
				c.MetricsAddr == ":9090" && c.NATSURL == "" && c.NATSSecretDir == "" && c.Sink == "" && c.Settings.Decision.ExtraSidecars == nil
		}},
		// config/500-bridge.yaml: every replica stands for the one Lease
		// under its pod's name.
		"election": {env: map[string]string{"SYSTEM_NAMESPACE": "istio-aux", "POD_NAME": "istio-aux-bridge-7d9f-x2"}, check: func(c Config) bool {
			e := c.Election
			return e.Lease == names.WatcherLease && e.Namespace == "istio-aux" && e.Identity == "istio-aux-bridge-7d9f-x2" &&
				e.LeaseDuration == 15*time.Second && e.RenewDeadline == 10*time.Second && e.RetryPeriod == 2*time.Second
		}},
		"election without a pod name takes the host name": {env: map[string]string{"SYSTEM_NAMESPACE": "istio-aux"}, check: func(c Config) bool {
			return c.Election.Identity != ""
		}},
		"election off": {env: map[string]string{"ISTIO_AUX_LEASE": ""}, check: func(c Config) bool {
			return c.Election.Lease == ""
		}},
		"a Lease needs its namespace": {env: nil, wantErr: true},
		"a dispatcher needs no Lease": {env: map[string]string{"ISTIO_AUX_ROLE": "dispatch", "K_SINK": "http://f"}, check: func(c Config) bool {
			return c.Election.Lease == ""
		}},
		"dispatch role with a sink": {env: map[string]string{"ISTIO_AUX_ROLE": "dispatch", "K_SINK": "http://f"}, check: func(c Config) bool {
			return c.Role == RoleDispatch && !c.Role.Watches() && c.Role.Dispatches() && c.Sink == "http://f"
		}},
		// config/500-bridge.yaml mounts the NATS credentials there; the
		// variable went unread before the bridge ran in a cluster.
		"NATS credentials directory": {env: map[string]string{"SYSTEM_NAMESPACE": "istio-aux", "NATS_SECRET_DIR": "/etc/istio-aux/nats"}, check: func(c Config) bool {
			return c.NATSSecretDir == "/etc/istio-aux/nats"
		}},
		"resync and sidecars": {env: map[string]string{"SYSTEM_NAMESPACE": "istio-aux", "ISTIO_AUX_RESYNC": "10m", "ISTIO_AUX_SIDECARS": "vault-agent, fluent-bit"}, check: func(c Config) bool {
			return c.Settings.Resync == 10*time.Minute && len(c.Settings.Decision.ExtraSidecars) == 2 && c.Settings.Decision.ExtraSidecars[1] == "fluent-bit"
		}},
		// config/500-bridge.yaml: the function's revisions' private slices.
		"direct delivery": {env: map[string]string{"SYSTEM_NAMESPACE": "istio-aux", "K_SINK": "http://f",
			"ISTIO_AUX_SINK_ENDPOINTS": "serving.knative.dev/service=proxy-quit,networking.internal.knative.dev/serviceType=Private"}, check: func(c Config) bool {
			return c.SinkEndpoints == "serving.knative.dev/service=proxy-quit,networking.internal.knative.dev/serviceType=Private"
		}},
		"direct delivery needs a selector": {env: map[string]string{"SYSTEM_NAMESPACE": "istio-aux", "ISTIO_AUX_SINK_ENDPOINTS": "a in ("}, wantErr: true},
		"direct delivery needs the function's namespace": {env: map[string]string{"ISTIO_AUX_ROLE": "dispatch", "K_SINK": "http://f",
			"ISTIO_AUX_SINK_ENDPOINTS": "serving.knative.dev/service=proxy-quit"}, wantErr: true},
		"resync off is refused":          {env: map[string]string{"ISTIO_AUX_RESYNC": "0s"}, wantErr: true},
		"unknown role":                   {env: map[string]string{"ISTIO_AUX_ROLE": "both"}, wantErr: true},
		"bad resync":                     {env: map[string]string{"ISTIO_AUX_RESYNC": "often"}, wantErr: true},
		"resync inside the dedup window": {env: map[string]string{"ISTIO_AUX_RESYNC": "1m"}, wantErr: true},
		"bad sidecar name":               {env: map[string]string{"ISTIO_AUX_SIDECARS": "vault agent"}, wantErr: true},
	}
	for name, tc := range cases {
		c, err := configFromLookup(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v, wantErr %v", name, err, tc.wantErr)
			continue
		}
		if err == nil && !tc.check(c) {
			t.Errorf("%s: unexpected config %+v", name, c)
		}
	}
}

// TestRunDispatchRole runs the binary's wiring as a dispatcher against a
// real nats-server and an HTTP sink, and checks its endpoints.
func TestRunDispatchRole(t *testing.T) {
	srv := testenv.StartServer(t)
	var got atomic.Int32
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Ce-Type") == podevent.TypePodUpdated {
			got.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(sink.Close) // after Run has stopped (cleanups run last first)

	ctx, base := runApp(t, Config{NATSURL: srv.URL(), Stream: "ISTIO_AUX", Sink: sink.URL, Role: RoleDispatch,
		MetricsAddr: "127.0.0.1:0", SinkTimeout: time.Second})
	testenv.Eventually(t, 5*time.Second, "/readyz", func() bool { return status(base+"/readyz") == http.StatusOK })

	nc := testenv.Connect(t, srv.URL())
	js, err := publish.NewJetStream(nc, 8)
	if err != nil {
		t.Fatal(err)
	}
	pub := publish.New(nc, js, metrics.NewBridge(nil), transport.DefaultName, 8)
	go func() { _ = pub.Run(ctx) }()
	ev, err := podevent.New("test", &slim.Pod{Meta: slim.Meta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, &ev, "", func(error) {}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "delivery to K_SINK", func() bool { return got.Load() == 1 })
	testenv.Eventually(t, 5*time.Second, "the delivery metric", func() bool {
		return strings.Contains(body(base+"/metrics"), `istio_aux_dispatch_delivered_total{class="2xx"} 1`)
	})
	if status(base+"/healthz") != http.StatusOK {
		t.Error("/healthz not ok")
	}
}

// runApp runs Run with cfg until the test ends, and returns its context and
// the base URL of its metrics and health endpoints. Run ending before it
// listens fails the test; an error from Run at the end is a test error.
func runApp(t *testing.T, cfg Config) (context.Context, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(testenv.Context(t))
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, nil, HTTPSink(cfg), addrs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case a := <-addrs:
		return ctx, "http://" + a.String()
	case err := <-done:
		done <- err // for the cleanup, which waits for Run's end
		t.Fatalf("Run ended before it listened: %v", err)
		return nil, ""
	}
}

func status(url string) int {
	r, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer r.Body.Close()
	return r.StatusCode
}

func body(url string) string {
	r, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// A bridge started while NATS is down waits for it, not ready, instead of
// exiting (which the kubelet would answer with a growing back-off).
func TestRunWaitsForNATS(t *testing.T) {
	srv := testenv.StartServer(t)
	url := srv.URL()
	srv.Shutdown()
	_, base := runApp(t, Config{NATSURL: url, Stream: "ISTIO_AUX", Sink: "http://127.0.0.1:1", Role: RoleDispatch,
		MetricsAddr: "127.0.0.1:0", SinkTimeout: time.Second})
	if s := status(base + "/readyz"); s != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d with NATS down, want 503", s)
	}
	srv.Start()
	testenv.Eventually(t, 20*time.Second, "/readyz once NATS is up", func() bool { return status(base+"/readyz") == http.StatusOK })
}

// TestMinResyncIsTheDuplicateWindow: the settings refuse a resync period
// inside JetStream's duplicate window, which they cannot import.
func TestMinResyncIsTheDuplicateWindow(t *testing.T) {
	if settings.MinResync != transport.DuplicateWindow {
		t.Errorf("settings.MinResync %v, transport.DuplicateWindow %v: keep them equal", settings.MinResync, transport.DuplicateWindow)
	}
}
