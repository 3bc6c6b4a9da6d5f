package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// proxy is the stand-in's state: it becomes ready (LIVE, workers started,
// first CDS and LDS updates accepted) readyDelay after it starts, as Envoy
// does once istiod's first configuration has arrived, and it may be
// draining. quit is closed when the admin API asks it to exit.
type proxy struct {
	start      time.Time
	readyDelay time.Duration
	// drainDelay holds /drain_listeners' answer back (a slow drain); a
	// quitquitquit meanwhile ends the wait.
	drainDelay time.Duration
	args       []string
	now        func() time.Time

	mu       sync.Mutex
	draining bool
	quitOnce sync.Once
	quit     chan struct{}
}

func newProxy(readyDelay time.Duration, args []string) *proxy {
	return &proxy{start: time.Now(), readyDelay: readyDelay, args: args, now: time.Now, quit: make(chan struct{})}
}

func (p *proxy) ready() bool { return p.now().Sub(p.start) >= p.readyDelay }

// state is Envoy's server.state: 0 LIVE, 2 PRE_INITIALIZING. Draining
// listeners does not change it (only a failed health check does, in Envoy).
func (p *proxy) state() (int, string) {
	if p.ready() {
		return 0, "LIVE"
	}
	return 2, "PRE_INITIALIZING"
}

// stats are the counters pilot-agent reads: its readiness probe needs
// server.state LIVE and listener_manager.workers_started 1, and at least
// one accepted CDS and LDS update.
func (p *proxy) stats() map[string]int {
	state, _ := p.state()
	updated := 0
	if p.ready() {
		updated = 1
	}
	return map[string]int{
		"server.state":                         state,
		"listener_manager.workers_started":     updated,
		"cluster_manager.cds.update_success":   updated,
		"cluster_manager.cds.update_rejected":  0,
		"listener_manager.lds.update_success":  updated,
		"listener_manager.lds.update_rejected": 0,
	}
}

// adminHandler serves the admin API endpoints pilot-agent and the proxy's
// users call. Unknown paths get 404 like Envoy's admin.
func (p *proxy) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		_, name := p.state()
		if !p.ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, name)
	})
	mux.HandleFunc("/server_info", func(w http.ResponseWriter, _ *http.Request) {
		_, name := p.state()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"version":              "istio-aux-envoy-standin/0.0.0/Clean/RELEASE/BoringSSL",
			"state":                name,
			"uptime_current_epoch": fmt.Sprintf("%ds", int(p.now().Sub(p.start).Seconds())),
			"command_line_options": map[string]any{"args": p.args},
		})
	})
	mux.HandleFunc("/stats", p.serveStats)
	mux.HandleFunc("/stats/prometheus", func(w http.ResponseWriter, _ *http.Request) {
		state, _ := p.state()
		fmt.Fprintf(w, "# TYPE envoy_server_state gauge\nenvoy_server_state{} %d\n", state)
	})
	mux.HandleFunc("/healthz/ready", p.serveHealth)
	mux.HandleFunc("/drain_listeners", post(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.draining = true
		p.mu.Unlock()
		log.Printf("drain_listeners %s: draining (listeners stay open; exit comes from quitquitquit, SIGTERM or the agent)", r.URL.RawQuery)
		if p.drainDelay > 0 {
			log.Printf("drain_listeners: answering in %s (%s)", p.drainDelay, EnvDrainDelay)
			select {
			case <-time.After(p.drainDelay):
			case <-p.quit:
			case <-r.Context().Done():
			}
		}
		fmt.Fprintln(w, "OK")
	}))
	mux.HandleFunc("/quitquitquit", post(func(w http.ResponseWriter, _ *http.Request) {
		log.Printf("quitquitquit: exiting 0")
		fmt.Fprintln(w, "OK")
		p.exit()
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "invalid path: "+r.URL.Path, http.StatusNotFound)
	})
	return mux
}

// serveHealth answers like Envoy's health check filter when nothing else
// routes /healthz/ready: 200 once ready, 503 before and while draining.
func (p *proxy) serveHealth(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	draining := p.draining
	p.mu.Unlock()
	if !p.ready() || draining {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "OK")
}

// serveStats prints "name: value" lines, filtered by the filter query
// parameter (a regular expression, as in Envoy); usedonly is accepted and
// ignored.
func (p *proxy) serveStats(w http.ResponseWriter, r *http.Request) {
	var filter *regexp.Regexp
	if f := r.URL.Query().Get("filter"); f != "" {
		var err error
		if filter, err = regexp.Compile(f); err != nil {
			http.Error(w, "invalid regex: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	stats := p.stats()
	names := make([]string, 0, len(stats))
	for name := range stats {
		if filter == nil || filter.MatchString(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "%s: %d\n", name, stats[name])
	}
	_, _ = io.WriteString(w, b.String())
}

// exit asks main to stop with code 0 after the current response is sent.
func (p *proxy) exit() { p.quitOnce.Do(func() { close(p.quit) }) }

// post rejects other methods, as Envoy's admin does for mutating endpoints.
func post(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "This endpoint requires POST", http.StatusMethodNotAllowed)
			return
		}
		h(w, r)
	}
}
