//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

func envInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

// plan lays out n Jobs: one in 30 (at least one each) outside the opt-in —
// a namespace not opted in, and a pod annotated enabled=false in an
// opted-in one — and the rest a round-robin of the three opted-in shapes
// over two namespaces (one per opt-in label), each running 1–4 s.
func plan(rng *rand.Rand, n int, optedIn []string, ctl string) []testJob {
	outside := max(2, n/30)
	var jobs []testJob
	for i := range n {
		j := testJob{name: fmt.Sprintf("job-%04d", i), runFor: 1 + rng.IntN(4)}
		switch {
		case i < outside/2:
			j.kind, j.namespace = control, ctl
		case i < outside:
			j.kind, j.namespace = optOut, optedIn[i%len(optedIn)]
		default:
			j.kind, j.namespace = kind(i%3), optedIn[i%len(optedIn)]
		}
		jobs = append(jobs, j)
	}
	rng.Shuffle(len(jobs), func(a, b int) { jobs[a], jobs[b] = jobs[b], jobs[a] })
	return jobs
}

// TestChaos runs CHAOS_JOBS Jobs (300) through istio-aux while SIGKILLing
// the bridge, the dispatcher and the function at random and taking NATS
// away for 30 s, then checks that nothing was lost, nothing quit early and
// nothing outside the opt-in was touched. CHAOS_SEED replays a schedule.
func TestChaos(t *testing.T) {
	n := int(envInt("CHAOS_JOBS", 300))
	seed := uint64(envInt("CHAOS_SEED", time.Now().UnixNano()%1_000_000_000))
	outage := time.Duration(envInt("CHAOS_NATS_OUTAGE_SECONDS", 30)) * time.Second
	pace := time.Duration(envInt("CHAOS_CREATE_INTERVAL_MS", 300)) * time.Millisecond
	fmt.Fprintf(os.Stderr, "chaos: seed %d (CHAOS_SEED=%d replays this schedule), %d jobs\n", seed, seed, n)
	loadBefore := loadavg()

	optedIn := []string{
		mesh.Namespace(t, env, "-a", true, mesh.OptedIn),
		mesh.Namespace(t, env, "-b", true, map[string]string{keys.LegacyLabel: keys.LegacyLabelValue}),
	}
	ctl := mesh.Namespace(t, env, "-control", true, nil)
	jobs := plan(rand.New(rand.NewPCG(seed, 1)), n, optedIn, ctl)
	s := startStack(t, true)
	quitsBefore := len(quits(t))
	start := time.Now()

	// The schedule: NATS goes at a random point in the first half of the
	// creation phase; kills run until creation ends plus 15 s (and past the
	// outage), so faults hit every stage of a pod's life.
	creation := time.Duration(n) * pace
	rng := rand.New(rand.NewPCG(seed, 2))
	outageAt := creation/4 + time.Duration(rng.Int64N(int64(creation/4)+1))
	chaosFor := max(creation+15*time.Second, outageAt+outage+10*time.Second)
	chaosCtx, stopChaos := context.WithTimeout(context.Background(), chaosFor)
	defer stopChaos()
	var outageStart time.Time // written before wg.Wait, read after
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-chaosCtx.Done():
		case <-time.After(outageAt):
			fmt.Fprintf(os.Stderr, "chaos: +%s NATS down for %s\n", time.Since(start).Round(time.Second), outage)
			outageStart = time.Now()
			s.nats.kill(outage)
		}
	})
	victims := []*component{s.bridge, s.dispatch, s.function}
	wg.Go(func() {
		for {
			wait := 3*time.Second + time.Duration(rng.Int64N(int64(7*time.Second)))
			victim := victims[rng.IntN(len(victims))]
			down := 200*time.Millisecond + time.Duration(rng.Int64N(int64(3*time.Second)))
			select {
			case <-chaosCtx.Done():
				return
			case <-time.After(wait):
			}
			victim.kill(down)
		}
	})

	tick := time.NewTicker(pace)
	for _, j := range jobs {
		<-tick.C
		mesh.CreateJob(t, env, j.namespace, j.object())
	}
	tick.Stop()
	created := time.Since(start)
	wg.Wait()
	fmt.Fprintf(os.Stderr, "chaos: +%s all jobs created, faults over; waiting for every opted-in Job\n", time.Since(start).Round(time.Second))
	for _, c := range s.all() {
		if err := c.waitReady(context.Background(), 2*time.Minute); err != nil {
			t.Fatalf("%s not back after the chaos: %v", c.name, err)
		}
	}

	want := 0
	for _, j := range jobs {
		if j.kind.optedIn() {
			want++
		}
	}
	deadline := time.Duration(envInt("CHAOS_DEADLINE_SECONDS", 480)) * time.Second
	last := time.Now()
	err := poll.Until(context.Background(), deadline, func(ctx context.Context) (bool, error) {
		got, err := finished(ctx, jobs)
		if time.Since(last) > 30*time.Second {
			last = time.Now()
			fmt.Fprintf(os.Stderr, "chaos: +%s %d/%d opted-in Jobs finished\n", time.Since(start).Round(time.Second), got, want)
		}
		return got == want, err
	})
	converged := time.Since(start)
	if err != nil {
		t.Errorf("opted-in Jobs not all finished within %s of the faults ending: %v", deadline, err)
	}
	// Pods outside the opt-in ran as long as the others: by now their apps
	// are done and, left alone, their proxies still run.
	if err := poll.Until(context.Background(), time.Minute, func(ctx context.Context) (bool, error) {
		for _, ns := range namespaces(jobs) {
			l, err := env.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, p := range l.Items {
				if p.Annotations[keys.AnnotationEnabled] == "false" || ns == ctl {
					if cluster.ContainerStatus(&p, app).State.Terminated == nil {
						return false, nil
					}
				}
			}
		}
		return true, nil
	}); err != nil {
		t.Errorf("apps outside the opt-in did not finish: %v", err)
	}

	f := verify(t, jobs, [2]time.Time{outageStart, outageStart.Add(outage)})
	if q := len(quits(t)) - quitsBefore; q != f.quits {
		t.Errorf("%d quits recorded during the run, %d of them on opted-in pods: some went elsewhere", q, f.quits)
	}
	for _, p := range f.problems {
		t.Error(p)
	}
	rows := [][2]string{
		{"seed", fmt.Sprint(seed)},
		{"jobs (opted in / outside)", fmt.Sprintf("%d (%d / %d)", n, want, n-want)},
		{"designed outcome reached", fmt.Sprintf("%d/%d jobs", n-f.wrongOutcome, n)},
	}
	for _, c := range []*component{s.bridge, s.dispatch, s.function, s.nats} {
		k, cr, st := c.counts()
		rows = append(rows, [2]string{"kills " + c.name, fmt.Sprintf("%d SIGKILL, %d crash restarts, %d starts", k, cr, st)})
	}
	rows = append(rows,
		[2]string{"NATS outage", fmt.Sprintf("%s from +%s", outage, outageAt.Round(time.Second))},
		[2]string{"quits (opted-in pods)", fmt.Sprintf("%d quits for %d pods", f.quits, f.optedInPods)},
		[2]string{"pods never quit", fmt.Sprint(f.neverQuit)},
		[2]string{"early quits", fmt.Sprint(f.early)},
		[2]string{"duplicates (proxy still up)", fmt.Sprint(f.duplicates)},
		[2]string{"quits after proxy exited", fmt.Sprint(f.lateExec)},
		[2]string{"untouched outside pods", fmt.Sprintf("%d/%d", f.controlPods-f.touchedControl, f.controlPods)},
		[2]string{"app end → quit", summary(f.latencies)},
		[2]string{"… apps ended before the outage", phase(f.byPhase[0])},
		[2]string{"… apps ended during it", phase(f.byPhase[1])},
		[2]string{"… apps ended after it", phase(f.byPhase[2])},
		[2]string{"wall: creation / all done", fmt.Sprintf("%s / %s", created.Round(time.Second), converged.Round(time.Second))},
		[2]string{"load avg before / after", loadBefore + " / " + loadavg()},
	)
	table(os.Stderr, "chaos summary", rows)
}

// loadavg is /proc/loadavg's 1-minute figure, for the report.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
