//go:build e2e

package bench

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// The completion chain, per pod (issue 25.4): where the time from the
// app's exit to the pod's Succeeded goes, for every way of ending a pod.
// Each link is a timestamp on the host's one clock: containerd's
// nanosecond timestamps of the containers' log lines, and the moments the
// bench's pod watch (the API server's, as the bridge's) first shows a
// state:
//
//	appExit    the app's last log line
//	appSeen    a status with the app terminated (the kubelet's PLEG relist and status write)
//	proxyTold  the proxy's first line about stopping: the Envoy stand-in's
//	           "quitquitquit" (the exec's quit arrived), "drain_listeners"
//	           (a native sidecar's preStop drain) or a signal (the kubelet's SIGTERM)
//	proxyLast  the proxy's last log line (pilot-agent, once Envoy exited)
//	succeeded  a status with phase Succeeded (the kubelet's relist, the
//	           sandbox's stop and its status write)

// chainLink is one link of the chain: its name and its length in a pod.
type chainLink struct {
	name string
	span func(c completion) (time.Duration, bool)
}

// between is the link from one timestamp to a later one; false when either
// is missing.
func between(from, to func(c completion) time.Time) func(c completion) (time.Duration, bool) {
	return func(c completion) (time.Duration, bool) {
		a, b := from(c), to(c)
		return b.Sub(a), !a.IsZero() && !b.IsZero()
	}
}

var chainLinks = []chainLink{
	{"app exit → status says so (kubelet)", between(func(c completion) time.Time { return c.appExit }, func(c completion) time.Time { return c.appSeen })},
	{"status → stop reaches the proxy (the quitter; native: the kubelet, may be < 0)", between(func(c completion) time.Time { return c.appSeen }, func(c completion) time.Time { return c.proxyTold })},
	{"app exit → stop reaches the proxy", between(func(c completion) time.Time { return c.appExit }, func(c completion) time.Time { return c.proxyTold })},
	{"stop reaches the proxy → its last line (pilot-agent)", between(func(c completion) time.Time { return c.proxyTold }, func(c completion) time.Time { return c.proxyLast })},
	{"proxy's last line → Succeeded (kubelet)", between(func(c completion) time.Time { return c.proxyLast }, func(c completion) time.Time { return c.succeeded })},
}

// chainRows are the results' rows: per link, its p50 / p99 in each arm
// named, from the arms' pods.
func chainRows(arms []*completionArm, byArm map[string][]completion, rounds int) [][2]string {
	var rows [][2]string
	for _, l := range chainLinks {
		var parts []string
		for _, a := range arms {
			var d []time.Duration
			for _, c := range byArm[a.ns] {
				if v, ok := l.span(c); ok {
					d = append(d, v)
				}
			}
			parts = append(parts, fmt.Sprintf("%s %s", a.short, secs(d)))
		}
		rows = append(rows, [2]string{fmt.Sprintf("chain, p50 / p99 (%d pods per way): %s", rounds, l.name), strings.Join(parts, "; ")})
	}
	return rows
}

// proxyStop reads the pod's istio-proxy log (an init container's for a
// native sidecar): when the first word of its stop arrived and when it
// wrote its last line.
func proxyStop(ctx context.Context, cs kubernetes.Interface, ns, pod string) (told, last time.Time, err error) {
	raw, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "istio-proxy", Timestamps: true}).DoRaw(ctx)
	if err != nil {
		return told, last, err
	}
	s := bufio.NewScanner(strings.NewReader(string(raw)))
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		stamp, line, _ := strings.Cut(s.Text(), " ")
		ts, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			continue // a line the runtime split; its first part has the stamp
		}
		last = ts
		if told.IsZero() && stopLine(line) {
			told = ts
		}
	}
	if told.IsZero() {
		return told, last, fmt.Errorf("no stop in the proxy's log (%d bytes)", len(raw))
	}
	return told, last, s.Err()
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
