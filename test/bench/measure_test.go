//go:build e2e

package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/poll"
)

// procKiB reads one "Field:  1234 kB" line of a /proc file.
func procKiB(path, field string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s has no %s", path, field)
}

// procStatusKiB reads one "Vm...:  1234 kB" field of /proc/<pid>/status.
func procStatusKiB(pid int, field string) (int64, error) {
	return procKiB(fmt.Sprintf("/proc/%d/status", pid), field)
}

// settledRSS polls VmRSS every 500 ms until four readings in a row lie
// within 1% (or 256 KiB) of each other: the process has finished its
// initial list and the Go runtime's GC and scavenger have settled.
func settledRSS(ctx context.Context, pid int) (int64, error) {
	return steadyRSS(ctx, pid, 500*time.Millisecond, 4, 60*time.Second)
}

// steadyRSS polls pid's VmRSS every interval until the last n readings lie
// within 1% (or 256 KiB) of each other, for up to timeout, and returns the
// last reading (a timeout's error wraps context.DeadlineExceeded).
func steadyRSS(ctx context.Context, pid int, interval time.Duration, n int, timeout time.Duration) (int64, error) {
	var last []int64
	err := poll.UntilEvery(ctx, interval, timeout, func(context.Context) (bool, error) {
		v, err := procStatusKiB(pid, "VmRSS")
		if err != nil {
			return false, poll.Permanent(err)
		}
		last = append(last, v)
		if len(last) < n {
			return false, nil
		}
		w := last[len(last)-n:]
		lo, hi := slices.Min(w), slices.Max(w)
		return hi-lo <= max(256, hi/100), nil
	})
	if len(last) == 0 {
		return 0, err
	}
	return last[len(last)-1], err
}

// msPerSecond is CPU time over a window of length d, in ms per second.
func msPerSecond(cpu, d time.Duration) float64 {
	return float64(cpu.Microseconds()) / 1000 / d.Seconds()
}

// resetPeak resets VmHWM so that it reports the peak from now on.
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

func mib(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

// cpuOf is the CPU time the threads of the processes pids have used, to
// the nanosecond (/proc/<pid>/task/*/schedstat; /proc/<pid>/stat counts 10
// ms ticks, too coarse for a nearly idle bridge): every CPU time make bench
// reads. Threads that exited are not counted; Go's runtime keeps its
// threads.
func cpuOf(t *testing.T, pids ...int) time.Duration {
	t.Helper()
	var sum time.Duration
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/task", pid)
		tasks, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("CPU of pid %d: %v", pid, err)
		}
		for _, task := range tasks {
			b, err := os.ReadFile(dir + "/" + task.Name() + "/schedstat")
			if f := strings.Fields(string(b)); err == nil && len(f) > 0 { // else the thread exited meanwhile
				ns, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					t.Fatalf("%s/%s/schedstat: %v", dir, task.Name(), err)
				}
				sum += time.Duration(ns)
			}
		}
	}
	return sum
}

// apiserverMetric sums metric name (with labels) of the API server's own
// /metrics.
func apiserverMetric(t *testing.T, cs kubernetes.Interface, name string, labels ...string) float64 {
	t.Helper()
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err == nil {
		var v float64
		if v, err = cluster.SumSamples(body, name, labels...); err == nil {
			return v
		}
	}
	t.Fatalf("the API server's %s: %v", name, err)
	return 0
}

// decodedSince is how many pods the bridge decoded since it had decoded
// decoded0, once at least changes more are in (every change of an opted-in
// pod reaches it; then whatever else it decoded is counted too), or after
// 10 s.
func decodedSince(t *testing.T, a *istioaux.IstioAux, decoded0 float64, changes int64) float64 {
	_ = poll.Until(context.Background(), 10*time.Second, func(context.Context) (bool, error) {
		return decodedPods(t, a)-decoded0 >= float64(changes), nil
	})
	return decodedPods(t, a) - decoded0
}

func decodedPods(t *testing.T, a *istioaux.IstioAux) float64 {
	v, err := cluster.Scrape(context.Background(), a.BridgeMetricsURL(), "istio_aux_bridge_pods_decoded_total")
	if err != nil {
		t.Fatalf("bridge metrics: %v", err)
	}
	return v
}

// saveProfile writes to path the profile a pprof endpoint at url answers.
func saveProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
