//go:build e2e

package bench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/poll"
)

// reactor starts one implementation's watcher on a namespace; nil is
// istio-aux itself (always running, acting on opted-in namespaces).
type reactor func(ctx context.Context, cs kubernetes.Interface, ex proxyquit.Execer, ns string) (func(), *atomic.Int64, error)

// shape is when the apps of the run's pods exit.
type shape struct {
	name  string
	every time.Duration // between two apps' exits
}

// reaction measures, for istio-aux, the floor and the serial reference,
// in both shapes, the time from a watch seeing "app terminated, proxy
// running" to the stub pilot-agent recording the quit in the pod, and
// reports istio-aux's p99 as ratios to the others'.
func reaction(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, p params, res *results) {
	ex, err := proxyquit.NewRemoteExecer(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	impls := []struct {
		name string
		run  reactor
	}{{"istio-aux", nil}, {"floor", floor}, {"serial", serial}}
	shapes := []shape{
		{fmt.Sprintf("one every %s", p.trickleEvery), p.trickleEvery},
		{fmt.Sprintf("burst of %d within %s", p.reactionPods, p.burstWithin), p.burstWithin / time.Duration(p.reactionPods)},
	}
	// A fresh control plane is slower on its first quits (connections,
	// caches, kwok's first execs), and istio-aux is measured first: every
	// implementation first quits a few pods untimed.
	for _, impl := range impls {
		reactionRun(t, c, cs, ex, "bench-warmup-"+impl.name, impl.run, 10, 50*time.Millisecond)
	}
	type run struct{ ns, what string }
	var runs []run
	for si, sh := range shapes {
		// BENCH_SHAPES=trickle or burst runs one shape (iterating on it).
		if sel := os.Getenv("BENCH_SHAPES"); sel != "" && !strings.Contains(sel, []string{"trickle", "burst"}[si]) {
			continue
		}
		p99 := map[string]time.Duration{}
		for _, impl := range impls {
			ns := fmt.Sprintf("bench-%s-%d", impl.name, si)
			lat, errs := reactionRun(t, c, cs, ex, ns, impl.run, p.reactionPods, sh.every)
			p99[impl.name] = percentile(lat, 0.99)
			res.add("reaction", fmt.Sprintf("%s, %s: p50 / p99 (%d exec errors)", impl.name, sh.name, errs), p50p99(lat), "", "")
			runs = append(runs, run{ns, impl.name + ", " + sh.name})
		}
		toFloor := ratio(p99["istio-aux"], p99["floor"])
		res.add("reaction", fmt.Sprintf("%s: istio-aux p99 / floor p99", sh.name), fmt.Sprintf("%.3gx", toFloor), "≤ 1.5x", verdict(toFloor <= 1.5))
		vsSerial := ratio(p99["serial"], p99["istio-aux"])
		target, met := "", ""
		if si == 1 {
			target, met = "≥ 5x", verdict(vsSerial >= 5)
		}
		res.add("reaction", fmt.Sprintf("%s: serial p99 / istio-aux p99", sh.name), fmt.Sprintf("%.3gx", vsSerial), target, met)
	}
	// Counted after every run, so that late duplicates are counted too.
	all, err := c.Quits()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		per := map[string]int{}
		for _, q := range all {
			if q.Namespace == r.ns {
				per[q.UID]++
			}
		}
		dups := 0
		for _, k := range per {
			dups += k - 1
		}
		once := len(per) == p.reactionPods && dups == 0
		target, met := "", ""
		if strings.HasPrefix(r.what, "istio-aux") {
			target, met = "every pod once", verdict(once)
		}
		res.add("reaction", r.what+": pods quit / extra quits", fmt.Sprintf("%d of %d / %d", len(per), p.reactionPods, dups), target, met)
	}
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// reactionRun creates n pods in a fresh namespace (opted in only for
// istio-aux), waits until their apps run, starts the reactor, ends the apps
// one every `every`, and waits until every pod's quit is recorded. It
// returns each pod's reaction latency and the reactor's exec errors.
func reactionRun(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, ex proxyquit.Execer, ns string, run reactor, n int, every time.Duration) ([]time.Duration, int64) {
	ctx := context.Background()
	if err := createNamespace(ctx, cs, ns, run == nil); err != nil {
		t.Fatal(err)
	}
	// Apps run "forever": the bench, not kwok, decides when they exit.
	if err := createPods(ctx, cs, ns, "r", 0, n, false, annotate(map[string]string{cluster.AnnotationRunFor: "3600s"})); err != nil {
		t.Fatal(err)
	}
	pods, err := waitRunning(ctx, cs, ns, n, 3*time.Minute)
	if err != nil {
		t.Fatalf("%s: %v", ns, err)
	}
	stopSeen, seenAt, err := seen(ctx, cs, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer stopSeen()
	errs := &atomic.Int64{}
	if run != nil {
		stop, e, err := run(ctx, cs, ex, ns)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		errs = e
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	start := time.Now()
	var wg sync.WaitGroup
	for i := range pods {
		wg.Add(1)
		go func(name string, at time.Time) {
			defer wg.Done()
			time.Sleep(time.Until(at)) // pacing the load, not synchronising
			if err := terminateApp(ctx, cs, ns, name); err != nil {
				t.Errorf("ending app of %s: %v", name, err)
			}
		}(pods[i].Name, start.Add(time.Duration(i)*every))
	}
	wg.Wait()
	var quits []cluster.Quit
	err = poll.Until(ctx, 5*time.Minute, func(context.Context) (bool, error) {
		all, err := c.Quits()
		if err != nil {
			return false, err
		}
		quits = quits[:0]
		pending := map[types.UID]bool{}
		for _, p := range pods {
			pending[p.UID] = true
		}
		for _, q := range all {
			if q.Namespace == ns {
				quits = append(quits, q)
				delete(pending, types.UID(q.UID))
			}
		}
		return len(pending) == 0, fmt.Errorf("%d of %d pods not quit yet", len(pending), n)
	})
	if err != nil {
		t.Errorf("%s: %v", ns, err)
	}
	at := seenAt()
	first := map[types.UID]time.Time{}
	for _, q := range quits {
		if f, has := first[types.UID(q.UID)]; !has || q.Time.Before(f) {
			first[types.UID(q.UID)] = q.Time
		}
	}
	lat := make([]time.Duration, 0, n)
	type sample struct{ d, at time.Duration }
	var slow []sample
	for uid, q := range first {
		s, ok := at[uid]
		if !ok {
			t.Errorf("%s: pod %s quit but never seen waiting", ns, uid)
			continue
		}
		lat = append(lat, q.Sub(s))
		slow = append(slow, sample{q.Sub(s), s.Sub(start)})
	}
	// The slowest few, with when they happened, go to the test log: a p99
	// is two or three pods, and when they fell says much about why.
	sort.Slice(slow, func(i, j int) bool { return slow[i].d > slow[j].d })
	for _, x := range slow[:min(5, len(slow))] {
		t.Logf("%s: slow quit %v, app ended %v into the run", ns, x.d.Round(time.Millisecond), x.at.Round(time.Millisecond))
	}
	return lat, errs.Load()
}
