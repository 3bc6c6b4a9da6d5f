//go:build e2e

package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/istio-aux/istio-aux/test/poll"
)

// procStatusKiB reads one "Vm...:  1234 kB" field of /proc/<pid>/status.
func procStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// settledRSS polls VmRSS until four readings in a row lie within 1% (or
// 256 KiB) of each other: the process has finished its initial list and
// the Go runtime's GC and scavenger have settled.
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

// resetPeak resets VmHWM so that it reports the peak from now on.
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

func mib(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }
