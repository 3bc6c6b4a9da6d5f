package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/poll"
)

func TestParseFlags(t *testing.T) {
	cases := map[string]struct {
		args   []string
		config string
		others []string
	}{
		"what pilot-agent passes": {
			args: []string{"-c", "etc/istio/proxy/envoy-rev.json", "--drain-time-s", "45", "--drain-strategy", "immediate",
				"--local-address-ip-version", "v4", "--file-flush-interval-msec", "1000", "--disable-hot-restart",
				"--allow-unknown-static-fields", "-l", "warning", "--skip-deprecated-logs"},
			config: "etc/istio/proxy/envoy-rev.json",
			others: []string{"--drain-time-s 45", "--drain-strategy immediate", "--local-address-ip-version v4",
				"--file-flush-interval-msec 1000", "--disable-hot-restart", "--allow-unknown-static-fields", "-l warning", "--skip-deprecated-logs"},
		},
		"long form with =":    {args: []string{"--config-path=b.json", "--concurrency=2"}, config: "b.json", others: []string{"--concurrency 2"}},
		"no configuration":    {args: []string{"--disable-hot-restart"}, others: []string{"--disable-hot-restart"}},
		"trailing value flag": {args: []string{"-c", "x.json", "--base-id"}, config: "x.json", others: []string{"--base-id"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			config, others := parseFlags(tc.args)
			if config != tc.config || !reflect.DeepEqual(others, tc.others) {
				t.Errorf("parseFlags = %q, %q; want %q, %q", config, others, tc.config, tc.others)
			}
		})
	}
}

func TestBootstrapRoutes(t *testing.T) {
	b, err := readBootstrap(filepath.Join("testdata", "bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Admin.Address.hostPort(); got != "127.0.0.1:15000" {
		t.Errorf("admin = %s", got)
	}
	want := map[string][]route{
		"0.0.0.0_15021": {{prefix: "/healthz/ready", target: "127.0.0.1:15020"}},
		"dynamic_only":  nil, // its cluster has no static socket address
	}
	for _, l := range b.StaticResources.Listeners {
		if got := b.routes(l); !reflect.DeepEqual(got, want[l.Name]) {
			t.Errorf("%s: routes %v, want %v", l.Name, got, want[l.Name])
		}
	}
}

func TestAdmin(t *testing.T) {
	clock := time.Unix(1000, 0)
	p := newProxy(time.Second, nil)
	p.start, p.now = clock, func() time.Time { return clock }
	srv := httptest.NewServer(p.adminHandler())
	defer srv.Close()
	get := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// pilot-agent's readiness queries, before and after the first config.
	const ready = "/stats?usedonly&filter=%5E%28server%5C.state%7Clistener_manager%5C.workers_started%29"
	const updates = "/stats?usedonly&filter=%5E%28cluster_manager%5C.cds%7Clistener_manager%5C.lds%29%5C.%28update_success%7Cupdate_rejected%29%24"
	steps := []struct {
		at           time.Duration
		method, path string
		code         int
		body         string
	}{
		{0, "GET", "/ready", 503, "PRE_INITIALIZING\n"},
		{0, "GET", ready, 200, "listener_manager.workers_started: 0\nserver.state: 2\n"},
		{0, "GET", updates, 200, "cluster_manager.cds.update_rejected: 0\ncluster_manager.cds.update_success: 0\nlistener_manager.lds.update_rejected: 0\nlistener_manager.lds.update_success: 0\n"},
		{0, "GET", "/healthz/ready", 503, "not ready\n"},
		{time.Second, "GET", "/ready", 200, "LIVE\n"},
		{time.Second, "GET", ready, 200, "listener_manager.workers_started: 1\nserver.state: 0\n"},
		{time.Second, "GET", updates, 200, "cluster_manager.cds.update_rejected: 0\ncluster_manager.cds.update_success: 1\nlistener_manager.lds.update_rejected: 0\nlistener_manager.lds.update_success: 1\n"},
		{time.Second, "GET", "/healthz/ready", 200, "OK\n"},
		{time.Second, "GET", "/quitquitquit", 405, "This endpoint requires POST\n"},
		{time.Second, "GET", "/nope", 404, "invalid path: /nope\n"},
		{time.Second, "POST", "/drain_listeners?inboundonly&graceful", 200, "OK\n"},
		{time.Second, "GET", "/healthz/ready", 503, "not ready\n"},
		{time.Second, "GET", "/ready", 200, "LIVE\n"},
	}
	for _, s := range steps {
		clock = time.Unix(1000, 0).Add(s.at)
		code, body := get(s.method, s.path)
		if code != s.code || body != s.body {
			t.Errorf("%s %s at %s = %d %q, want %d %q", s.method, s.path, s.at, code, body, s.code, s.body)
		}
	}
	select {
	case <-p.quit:
		t.Fatal("quit before quitquitquit")
	default:
	}
	if code, body := get("POST", "/quitquitquit"); code != 200 || body != "OK\n" {
		t.Errorf("quitquitquit = %d %q", code, body)
	}
	select {
	case <-p.quit:
	default:
		t.Error("quitquitquit did not ask to exit")
	}
	get("POST", "/quitquitquit") // a second one is harmless
}

// TestSlowDrain: with a drain delay /drain_listeners answers only after
// it, unless a quitquitquit comes first, which ends the wait at once.
func TestSlowDrain(t *testing.T) {
	const delay = 300 * time.Millisecond
	p := newProxy(0, nil)
	p.drainDelay = delay
	srv := httptest.NewServer(p.adminHandler())
	defer srv.Close()
	drain := func() (time.Duration, error) {
		start := time.Now()
		resp, err := http.Post(srv.URL+"/drain_listeners?inboundonly&graceful", "", nil)
		if err == nil {
			resp.Body.Close()
		}
		return time.Since(start), err
	}
	if took, err := drain(); err != nil || took < delay {
		t.Fatalf("drain answered after %s (%v), want at least %s", took, err, delay)
	}
	p.drainDelay = time.Minute
	done := make(chan time.Duration, 1)
	go func() {
		took, _ := drain()
		done <- took
	}()
	poll.Eventually(t, 5*time.Second, "draining", func(context.Context) (bool, error) { return p.isDraining(), nil })
	resp, err := http.Post(srv.URL+"/quitquitquit", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case took := <-done:
		if took >= time.Minute {
			t.Errorf("drain answered after %s", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("quitquitquit did not end the drain's wait")
	}
}

// TestQuitDelay: with a quit delay, quitquitquit answers, and asks to exit,
// only once the delay is over.
func TestQuitDelay(t *testing.T) {
	p := newProxy(0, nil)
	p.quitDelay = 300 * time.Millisecond
	srv := httptest.NewServer(p.adminHandler())
	defer srv.Close()
	answered := make(chan error, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/quitquitquit", "", nil)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	select {
	case <-p.quit:
		t.Fatal("asked to exit before the delay was over")
	case err := <-answered:
		t.Fatalf("answered before the delay was over (%v)", err)
	case <-time.After(p.quitDelay / 2): // within the delay: nothing yet
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.quit:
	default:
		t.Error("quitquitquit did not ask to exit")
	}
}
