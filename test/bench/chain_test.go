//go:build e2e

package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// The completion chain, per pod (issue 25.4, docs/bench.md): where the
// time from the app's exit to the pod's Succeeded goes. Each link is a
// timestamp on the host's one clock: containerd's timestamps of the
// containers' log lines, and the moments the bench's pod watch first shows
// a state.

// chainLink is a span of a pod's timeline: its name and its two ends.
type chainLink struct {
	name string
	ends func(c completion) (from, to time.Time)
}

// spans is the link's length in each of pods where both ends are known.
func (l chainLink) spans(pods []completion) []time.Duration {
	var d []time.Duration
	for _, c := range pods {
		if from, to := l.ends(c); !from.IsZero() && !to.IsZero() {
			d = append(d, to.Sub(from))
		}
	}
	return d
}

// chainLinks are the chain's links.
var chainLinks = []chainLink{
	{"app exit → status says so (kubelet)", func(c completion) (time.Time, time.Time) { return c.appExit, c.appSeen }},
	{"status → stop reaches the proxy (the quitter; native: the kubelet, may be < 0)",
		func(c completion) (time.Time, time.Time) { return c.appSeen, c.proxyTold }},
	{"app exit → stop reaches the proxy", func(c completion) (time.Time, time.Time) { return c.appExit, c.proxyTold }},
	{"stop reaches the proxy → its last line (pilot-agent)", func(c completion) (time.Time, time.Time) { return c.proxyTold, c.proxyLast }},
	{"proxy's last line → Succeeded (kubelet)", func(c completion) (time.Time, time.Time) { return c.proxyLast, c.succeeded }},
}

// addChainRows adds per link its p50 / p99 in each arm named, from the
// arms' pods.
func addChainRows(res *results, arms []*completionArm, byArm map[string][]completion, rounds int) {
	for _, l := range chainLinks {
		var parts []string
		for _, a := range arms {
			parts = append(parts, fmt.Sprintf("%s %s", a.short, secs(l.spans(byArm[a.ns]))))
		}
		res.add("completion", fmt.Sprintf("chain, p50 / p99 (%d pods per way): %s", rounds, l.name), strings.Join(parts, "; "), "", "")
	}
}

// proxyStop reads the pod's istio-proxy log (an init container's for a
// native sidecar): when the first word of its stop arrived and when it
// wrote its last line.
func proxyStop(ctx context.Context, cs kubernetes.Interface, ns, pod string) (told, last time.Time, err error) {
	lines, err := containerLog(ctx, cs, ns, pod, "istio-proxy")
	for _, l := range lines {
		last = l.at
		if told.IsZero() && stopLine(l.text) {
			told = l.at
		}
	}
	if err == nil && told.IsZero() {
		err = fmt.Errorf("no stop in the proxy's log (%d lines)", len(lines))
	}
	return told, last, err
}

// stopLine: the Envoy stand-in's line for the first word of a stop
// (test/cmd/envoy): the quit, a drain, or a signal.
func stopLine(line string) bool {
	_, msg, ok := strings.Cut(line, "envoy-standin: ")
	if !ok {
		return false
	}
	return strings.Contains(msg, "quitquitquit") || strings.Contains(msg, "drain_listeners") ||
		strings.Contains(msg, ": draining, then exiting 0")
}
