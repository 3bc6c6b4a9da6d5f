// Command istio-proxy-ish stands in for the istio-proxy container (pilot-agent
// plus Envoy) in harness tests on the real node that do not need Istio. Its
// image installs it as pilot-agent, so the commands istio-aux and Istio's
// injector run work unchanged:
//
//	pilot-agent [proxy ...]             serve like Envoy: 15000 admin (/ready,
//	                                    POST /quitquitquit exits 0) and, once
//	                                    ready, 15021 /healthz/ready
//	pilot-agent request METHOD PATH     call the admin port like pilot-agent:
//	                                    exit 0 on 200 or 404, 255 otherwise
//	pilot-agent wait                    return once 15021 is ready (60 s max),
//	                                    as Istio's postStart hook does
//
// PROXY_READY_AFTER (e.g. "2s") delays readiness: until then nothing listens
// on 15021, so an app that needs the network fails as it would before Envoy
// has its configuration. SIGTERM ends the proxy with 0, as pilot-agent does
// after draining.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const (
	adminAddr  = "127.0.0.1:15000"
	healthAddr = ":15021" // all interfaces, as Envoy's health listener
	readyURL   = "http://127.0.0.1:15021/healthz/ready"
)

func main() {
	args := os.Args[1:]
	cmd := "proxy"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "proxy":
		os.Exit(proxy(os.Getenv("PROXY_READY_AFTER")))
	case "request":
		os.Exit(request(args))
	case "wait":
		os.Exit(wait(60 * time.Second))
	default:
		fmt.Fprintf(os.Stderr, "istio-proxy-ish: unknown command %q\n", cmd)
		os.Exit(2)
	}
}

func proxy(readyAfter string) int {
	delay, err := time.ParseDuration(or(readyAfter, "0s"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "PROXY_READY_AFTER:", err)
		return 2
	}
	quit := make(chan struct{})
	admin := http.NewServeMux()
	admin.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "LIVE") })
	admin.HandleFunc("/quitquitquit", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		fmt.Fprintln(w, "OK")
		fmt.Println("proxy: quitquitquit received, exiting 0")
		close(quit)
	})
	al, err := net.Listen("tcp", adminAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		return 1
	}
	go func() { _ = http.Serve(al, admin) }()
	fmt.Println("proxy: admin listening on", adminAddr)

	errs := make(chan error, 1)
	go func() {
		time.Sleep(delay) // the configurable start-up of Envoy, not a synchronisation
		health := http.NewServeMux()
		health.HandleFunc("/healthz/ready", func(http.ResponseWriter, *http.Request) {})
		hl, err := net.Listen("tcp", healthAddr)
		if err != nil {
			errs <- err
			return
		}
		fmt.Println("proxy: ready, health listening on", healthAddr)
		errs <- http.Serve(hl, health)
	}()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-quit:
		time.Sleep(50 * time.Millisecond) // let the 200 reach the caller
		return 0
	case s := <-sigs:
		fmt.Println("proxy:", s, "received, exiting 0")
		return 0
	case err := <-errs:
		fmt.Fprintln(os.Stderr, "proxy:", err)
		return 1
	}
}

// request is `pilot-agent request METHOD PATH` against the admin port.
func request(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: request METHOD PATH")
		return 2
	}
	req, err := http.NewRequest(strings.ToUpper(args[0]), "http://"+adminAddr+"/"+strings.TrimPrefix(args[1], "/"), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 255
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 255
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		fmt.Fprintln(os.Stderr, resp.Status)
		return 255
	}
	return 0
}

// wait polls readiness like `pilot-agent wait`.
func wait(timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(readyURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Println("wait: proxy ready")
				return 0
			}
			err = errors.New(resp.Status)
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "wait: proxy not ready:", err)
			return 1
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
