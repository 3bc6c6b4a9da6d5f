//go:build e2e

package ha

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// result is what a fault left, measured from the load's pods.
type result struct {
	fault string
	// resume: from the fault's start to the first quit seen after it.
	resume time.Duration
	// jobs: pods whose app ended within the window; their app-exit → quit
	// latencies' median and p99.
	jobs     int
	p50, p99 time.Duration
	// unheld: pods created in the window without the hold; early: proxies
	// seen stopped before their app ended; repeated: pods quit more than
	// once (their ProxyQuit Events); unquit: pods whose app ended and whose
	// proxy was never seen quit.
	unheld, early, repeated, unquit int
	// silent: proxies quit whose ProxyQuit Event never came. The function
	// writes a quit's Event before its exec (issue 43), so one on the node
	// that went, killed after the exec, has left it: a silent pod is a
	// record lost some other way. Not a lost quit.
	silent int
	// silentPods names them, for the fault's log (eventsOf).
	silentPods []string
	// refused: pod creations the API server refused (FailedCreate), and
	// the longest a Job created in the window waited for its pod: what
	// failurePolicy Fail costs while a webhook replica's node is dead.
	refused   int32
	podWaited time.Duration
}

func measure(name string, pods []tracked, events map[string]int32, start time.Time, window time.Duration) result {
	r := result{fault: name, resume: -1}
	end := start.Add(window)
	var lat []time.Duration
	for _, p := range pods {
		if !p.created.Before(start) && p.created.Before(end) && !p.held {
			r.unheld++
		}
		if !p.jobAt.IsZero() && !p.jobAt.Before(start) && p.jobAt.Before(end) {
			r.podWaited = max(r.podWaited, p.created.Sub(p.jobAt))
		}
		if p.early {
			r.early++
		}
		if events[p.name] > 1 {
			r.repeated++
		}
		switch {
		case !p.appExit.IsZero() && p.quit.IsZero():
			r.unquit++
		case !p.quit.IsZero() && events[p.name] == 0:
			r.silent++
			r.silentPods = append(r.silentPods, p.name)
		}
		if !p.quit.IsZero() && !p.quit.Before(start) && (r.resume < 0 || p.quit.Sub(start) < r.resume) {
			r.resume = p.quit.Sub(start)
		}
		if !p.appExit.IsZero() && !p.quit.IsZero() && !p.appExit.Before(start) && p.appExit.Before(end) {
			lat = append(lat, p.quit.Sub(p.appExit))
		}
	}
	slices.Sort(lat)
	r.jobs = len(lat)
	if len(lat) > 0 {
		r.p50 = lat[len(lat)/2]
		r.p99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return r
}

func (r result) String() string {
	return fmt.Sprintf("%-36s quits resumed %5.1fs  jobs %3d  app exit→quit p50 %5.1fs p99 %5.1fs  unheld %d  early %d  repeated %d  unquit %d  silent %d  refused %d  pod waited ≤%3.0fs",
		r.fault, r.resume.Seconds(), r.jobs, r.p50.Seconds(), r.p99.Seconds(), r.unheld, r.early, r.repeated, r.unquit, r.silent,
		r.refused, r.podWaited.Seconds())
}

// ok reports whether the fault stayed within the bounds.
func (r result) ok() bool {
	return r.unheld+r.early+r.repeated+r.unquit == 0 && r.resume >= 0 && r.resume <= resumeWithin
}

// check holds the fault to the bounds.
func (r result) check(t *testing.T) {
	t.Helper()
	if r.unheld+r.early+r.repeated+r.unquit > 0 {
		t.Errorf("%s: %d pods admitted without the hold, %d proxies quit before their apps ended, %d quit more than once, %d never quit",
			r.fault, r.unheld, r.early, r.repeated, r.unquit)
	}
	if r.resume < 0 || r.resume > resumeWithin {
		t.Errorf("%s: quits resumed %v after the fault, want within %v", r.fault, r.resume, resumeWithin)
	}
}

// report writes the rows to the log and to $HA_RESULTS (default
// _output/ha-results.txt), from which the README's table is made.
func report(t *testing.T, shape string, rows []result) {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s, %s, %d nodes on this machine\n", shape, time.Now().Format(time.RFC3339), nodes)
	for _, r := range rows {
		b.WriteString(r.String() + "\n")
	}
	t.Log("\n" + b.String())
	path := os.Getenv("HA_RESULTS")
	if path == "" {
		path = filepath.Join(cluster.CacheDir(), "ha-results.txt")
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Log(err)
		return
	}
	defer f.Close()
	_, _ = f.WriteString(b.String())
}
