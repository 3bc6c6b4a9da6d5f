// Command envoy is the smallest stand-in for Envoy that the real
// pilot-agent can run as its proxy binary (ProxyConfig binaryPath), where
// Envoy itself (C++) cannot be built. It accepts and logs the flags
// pilot-agent passes, reads the bootstrap pilot-agent rendered (-c) and
// serves what that bootstrap declares and the agent uses:
//
//   - the admin API (15000): /ready, /server_info, /stats (the counters of
//     pilot-agent's readiness probe), /stats/prometheus, POST /quitquitquit
//     (answers, then exits 0), POST /drain_listeners;
//
//   - each static listener's prefix routes to static clusters, proxied like
//     Envoy: 15021 /healthz/ready → the agent's 15020, which in turn reads
//     this admin API's stats.
//
//   - with the pod's traffic captured (interception mode REDIRECT, as the
//     bootstrap's node metadata says), the two virtual listeners istiod
//     would configure, 15001 and 15006, passing each connection through
//     to its original destination (capture.go), from the moment it is
//     ready: before that the app's connections are refused, as they are
//     until Envoy has its listeners.
//
// It becomes ready $ISTIO_AUX_ENVOY_READY_DELAY (default 1s) after it
// starts, as Envoy does once its first xDS configuration has arrived (set it
// for a pod through ProxyConfig proxyMetadata). On SIGTERM it drains its
// listeners and exits 0. $ISTIO_AUX_ENVOY_DRAIN_DELAY (default 0) holds
// the answer to /drain_listeners back, as a slow drain would: it keeps a
// native sidecar's preStop hook (pilot-agent's drain) running that long;
// $ISTIO_AUX_ENVOY_QUIT_DELAY (default 0) holds the answer to quitquitquit
// back, so that each quit holds a request of the function's that long.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvReadyDelay sets how long after start the stand-in reports ready.
const EnvReadyDelay = "ISTIO_AUX_ENVOY_READY_DELAY"

// EnvDrainDelay sets how long /drain_listeners takes to answer.
const EnvDrainDelay = "ISTIO_AUX_ENVOY_DRAIN_DELAY"

// EnvQuitDelay sets how long /quitquitquit takes to answer (and exit).
const EnvQuitDelay = "ISTIO_AUX_ENVOY_QUIT_DELAY"

func main() {
	log.SetPrefix("envoy-standin: ")
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if err := run(os.Args[1:]); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(args []string) error {
	config, flags := parseFlags(args)
	log.Printf("started with %s", strings.Join(args, " "))
	for _, f := range flags {
		log.Printf("ignoring flag %s", f)
	}
	if config == "" {
		return errors.New("no bootstrap configuration (-c)")
	}
	b, err := readBootstrap(config)
	if err != nil {
		return err
	}
	p := newProxy(time.Second, args)
	for name, d := range map[string]*time.Duration{EnvReadyDelay: &p.readyDelay, EnvDrainDelay: &p.drainDelay, EnvQuitDelay: &p.quitDelay} {
		if v := os.Getenv(name); v != "" {
			if *d, err = time.ParseDuration(v); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	servers := []*http.Server{{Addr: b.Admin.Address.hostPort(), Handler: p.adminHandler()}}
	for _, l := range b.StaticResources.Listeners {
		routes := b.routes(l)
		if len(routes) == 0 {
			log.Printf("listener %s: no route to a static cluster, not served", l.Name)
			continue
		}
		servers = append(servers, &http.Server{Addr: l.Address.hostPort(), Handler: routeHandler(routes)})
	}
	errs := make(chan error, len(servers))
	for _, s := range servers {
		s.ReadHeaderTimeout = 5 * time.Second
		l, err := net.Listen("tcp", s.Addr)
		if err != nil {
			return err
		}
		log.Printf("listening on %s", l.Addr())
		go func() { errs <- s.Serve(l) }()
	}
	captured, err := p.captureTraffic(b.interceptionMode(), kernelOriginalDst, errs)
	if err != nil {
		return err
	}
	defer captured()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-errs:
		return err
	case <-p.quit:
	case s := <-sig:
		p.setDraining()
		log.Printf("%s: draining, then exiting 0", s)
	}
	// Finish the responses in flight (the quitquitquit answer among them).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
	log.Printf("exiting 0")
	return nil
}

// parseFlags returns the -c (--config-path) value and every other flag,
// for the log. Envoy's flags take a value unless they are switches.
func parseFlags(args []string) (config string, others []string) {
	switches := map[string]bool{
		"--disable-hot-restart": true, "--allow-unknown-static-fields": true, "--skip-deprecated-logs": true,
		"--enable-core-dump": true, "--reject-unknown-dynamic-fields": true, "--log-format-escaped": true,
	}
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		if !hasValue && !switches[name] && i+1 < len(args) {
			i++
			value = args[i]
		}
		if name == "-c" || name == "--config-path" {
			config = value
			continue
		}
		others = append(others, strings.TrimSpace(name+" "+value))
	}
	return config, others
}

// captureTraffic serves the virtual listeners of interception mode mode
// once the proxy is ready (REDIRECT; TPROXY is not served, NONE has none),
// sending a listener's failure to errs. The returned func closes them.
func (p *proxy) captureTraffic(mode string, dst originalDst, errs chan<- error) (func(), error) {
	switch mode {
	case "NONE":
		return func() {}, nil
	case "REDIRECT":
	default:
		return nil, fmt.Errorf("interception mode %s: the stand-in passes captured traffic through for REDIRECT only", mode)
	}
	var mu sync.Mutex
	var open []net.Listener
	closed := false
	timer := time.AfterFunc(max(p.readyDelay-time.Since(p.start), 0), func() {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		for port, c := range captureListeners(dst) {
			l, err := net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", port))
			if err != nil {
				errs <- fmt.Errorf("%s: %w", c.name, err)
				return
			}
			log.Printf("%s listening on %s", c.name, l.Addr())
			open = append(open, l)
			go func() {
				if err := c.serve(l); err != nil {
					errs <- fmt.Errorf("%s: %w", c.name, err)
				}
			}()
		}
	})
	return func() {
		timer.Stop()
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for _, l := range open {
			_ = l.Close()
		}
	}, nil
}

// routeHandler proxies each prefix to its cluster's address.
func routeHandler(routes []route) http.Handler {
	mux := http.NewServeMux()
	for _, r := range routes {
		target := &url.URL{Scheme: "http", Host: r.target}
		mux.Handle(r.prefix, httputil.NewSingleHostReverseProxy(target))
	}
	return mux
}
