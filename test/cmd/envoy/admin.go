package main

import (
	"encoding/json"
	"fmt"
	"log"
	"maps"
	"net/http"
	"regexp"
	"slices"
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
	// quitDelay holds /quitquitquit's answer, and the exit, back.
	quitDelay time.Duration
	args      []string
	now       func() time.Time

	mu       sync.Mutex
	draining bool
	quitOnce sync.Once
	quit     chan struct{}
}

func newProxy(readyDelay time.Duration, args []string) *proxy {
	return &proxy{start: time.Now(), readyDelay: readyDelay, args: args, now: time.Now, quit: make(chan struct{})}
}

func (p *proxy) ready() bool { return p.now().Sub(p.start) >= p.readyDelay }

// stateName is Envoy's server.state by name. Draining listeners does not
// change it (only a failed health check does, in Envoy).
func (p *proxy) stateName() string {
	if p.ready() {
		return "LIVE"
	}
	return "PRE_INITIALIZING"
}

// stats are the counters pilot-agent reads: its readiness probe needs
// server.state LIVE (0; 2 is PRE_INITIALIZING) and
// listener_manager.workers_started 1, and at least one accepted CDS and LDS
// update.
func (p *proxy) stats() map[string]int {
	state, updated := 2, 0
	if p.ready() {
		state, updated = 0, 1
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

func (p *proxy) setDraining() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draining = true
}

func (p *proxy) isDraining() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.draining
}

// adminHandler serves the admin API endpoints pilot-agent and the proxy's
// users call. Unknown paths get 404 like Envoy's admin.
func (p *proxy) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !p.ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, p.stateName())
	})
	mux.HandleFunc("/server_info", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"version":              "istio-aux-envoy-standin/0.0.0/Clean/RELEASE/BoringSSL",
			"state":                p.stateName(),
			"uptime_current_epoch": fmt.Sprintf("%ds", int(p.now().Sub(p.start).Seconds())),
			"command_line_options": map[string]any{"args": p.args},
		})
	})
	mux.HandleFunc("/stats", p.serveStats)
	mux.HandleFunc("/stats/prometheus", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE envoy_server_state gauge\nenvoy_server_state{} %d\n", p.stats()["server.state"])
	})
	// Envoy's health check filter, when nothing else routes /healthz/ready:
	// 200 once ready, 503 before and while draining.
	mux.HandleFunc("/healthz/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !p.ready() || p.isDraining() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "OK")
	})
	mux.HandleFunc("/drain_listeners", post(func(w http.ResponseWriter, r *http.Request) {
		p.setDraining()
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
	mux.HandleFunc("/quitquitquit", post(func(w http.ResponseWriter, r *http.Request) {
		if p.quitDelay > 0 {
			log.Printf("quitquitquit: answering in %s (%s)", p.quitDelay, EnvQuitDelay)
			select {
			case <-time.After(p.quitDelay):
			case <-r.Context().Done():
			}
		}
		log.Printf("quitquitquit: exiting 0")
		fmt.Fprintln(w, "OK")
		// main exits 0 after the current response is sent.
		p.quitOnce.Do(func() { close(p.quit) })
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "invalid path: "+r.URL.Path, http.StatusNotFound)
	})
	return mux
}

// serveStats prints "name: value" lines, filtered by the filter query
// parameter (a regular expression, as in Envoy); usedonly is accepted and
// ignored.
func (p *proxy) serveStats(w http.ResponseWriter, r *http.Request) {
	filter, err := regexp.Compile(r.URL.Query().Get("filter"))
	if err != nil {
		http.Error(w, "invalid regex: "+err.Error(), http.StatusBadRequest)
		return
	}
	stats := p.stats()
	for _, name := range slices.Sorted(maps.Keys(stats)) {
		if filter.MatchString(name) {
			fmt.Fprintf(w, "%s: %d\n", name, stats[name])
		}
	}
}

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
