package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/istio-aux/istio-aux/test/httpget"
)

// serve answers 200 "ok" to every HTTP request on addr until killed: a
// backend for a Service in the cluster tests.
func serve(addr string) error {
	return http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	}))
}

// probe reaches each target through the pod's network as a workload would:
// an http:// URL is fetched (200 wanted), a host:port is resolved through
// the pod's resolver and dialled. Each is tried until it works or the
// deadline passes (a Service's endpoints may lag its backend's readiness).
// It prints one line per target and fails if any target failed.
func probe(ctx context.Context, client *http.Client, targets []string, within time.Duration) error {
	var failed []string
	for _, target := range targets {
		tctx, cancel := context.WithTimeout(ctx, within)
		err := retry(tctx, 200*time.Millisecond, func() error { return reach(tctx, client, target) })
		cancel()
		if err != nil {
			fmt.Printf("probe %s: %v\n", target, err)
			failed = append(failed, target)
			continue
		}
		fmt.Printf("probe %s: ok\n", target)
	}
	if len(failed) > 0 {
		return fmt.Errorf("unreachable: %s", strings.Join(failed, ", "))
	}
	return nil
}

func reach(ctx context.Context, client *http.Client, target string) error {
	if strings.HasPrefix(target, "http://") {
		return httpget.OK(ctx, client, target)
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return err
	}
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return err
	}
	conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", net.JoinHostPort(addrs[0], port))
	if err != nil {
		return fmt.Errorf("%s resolved to %v: %w", host, addrs, err)
	}
	return conn.Close()
}
