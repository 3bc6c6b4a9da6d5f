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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/bench/quitter"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// reactor starts one implementation's watcher on a namespace; nil is
// istio-aux itself (always running, acting on opted-in namespaces). The
// bench's own (quitter.Floor, serial) exec through the same client-go
// executor as istio-aux's function, so only the path to the exec differs.
type reactor func(ctx context.Context, cs kubernetes.Interface, ex proxyquit.Execer, ns string) (func(), *atomic.Int64, error)

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
	}{{"istio-aux", nil}, {"floor", quitter.Floor}, {"serial", serial}}
	// When the apps of a run's pods exit: every, between two apps' exits.
	shapes := []struct {
		key, name string
		every     time.Duration
	}{
		{"trickle", fmt.Sprintf("one every %s", p.trickleEvery), p.trickleEvery},
		{"burst", fmt.Sprintf("burst of %d within %s", p.reactionPods, p.burstWithin), p.burstWithin / time.Duration(p.reactionPods)},
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
		if sel := os.Getenv("BENCH_SHAPES"); sel != "" && !strings.Contains(sel, sh.key) {
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
	for _, r := range runs {
		pods, quits := quitCount(t, c, r.ns)
		target, met := "", ""
		if strings.HasPrefix(r.what, "istio-aux") {
			target, met = "every pod once", verdict(pods == p.reactionPods && quits == pods)
		}
		res.add("reaction", r.what+": pods quit / extra quits", fmt.Sprintf("%d of %d / %d", pods, p.reactionPods, quits-pods), target, met)
	}
}

// quitCount is how many pods of ns were quit, and how many quits they got,
// of every quit recorded so far.
func quitCount(t *testing.T, c *cluster.Cluster, ns string) (pods, quits int) {
	all, err := c.Quits()
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]bool{}
	for _, q := range all {
		if q.Namespace == ns {
			uids[q.UID] = true
			quits++
		}
	}
	return len(uids), quits
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
	if err := mesh.CreateNamespace(ctx, cs, ns, optedIn(run == nil)); err != nil {
		t.Fatal(err)
	}
	// Apps run "forever": the bench, not kwok, decides when they exit.
	if err := createPods(ctx, cs, refs(ns, "r", n), false, func(_ int, p *corev1.Pod) {
		p.Annotations[cluster.AnnotationRunFor] = "3600s"
	}); err != nil {
		t.Fatal(err)
	}
	pods, err := waitRunning(ctx, cs, ns, n, 3*time.Minute)
	if err != nil {
		t.Fatalf("%s: %v", ns, err)
	}
	stopSeen, err := seen(ctx, cs, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer stopSeen() // if the run fails first; stopping twice is fine
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
	for i, pod := range pods {
		wg.Go(func() {
			time.Sleep(time.Until(start.Add(time.Duration(i) * every))) // pacing the load, not synchronising
			if err := terminateApp(ctx, cs, ns, pod.Name); err != nil {
				t.Errorf("ending app of %s: %v", pod.Name, err)
			}
		})
	}
	wg.Wait()
	// Each pod's first quit.
	first := map[types.UID]time.Time{}
	err = poll.Until(ctx, 5*time.Minute, func(context.Context) (bool, error) {
		all, err := c.Quits()
		if err != nil {
			return false, err
		}
		for _, q := range all {
			if f, has := first[types.UID(q.UID)]; q.Namespace == ns && (!has || q.Time.Before(f)) {
				first[types.UID(q.UID)] = q.Time
			}
		}
		pending := len(pods)
		for _, p := range pods {
			if _, ok := first[p.UID]; ok {
				pending--
			}
		}
		return pending == 0, fmt.Errorf("%d of %d pods not quit yet", pending, n)
	})
	if err != nil {
		t.Errorf("%s: %v", ns, err)
	}
	at := stopSeen()
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

// serial is the reference implementation's approach: a full-pod informer,
// a rate-limited queue and one worker that reconciles pods one at a time
// and execs synchronously when only istio-proxy still runs.
func serial(ctx context.Context, cs kubernetes.Interface, ex proxyquit.Execer, ns string) (stop func(), errs *atomic.Int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	errs = &atomic.Int64{}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]())
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			q.Add(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
	}); err != nil {
		cancel()
		return nil, nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		cancel()
		return nil, nil, ctx.Err()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			key, shutdown := q.Get()
			if shutdown {
				return
			}
			pod, err := inf.Lister().Pods(key.Namespace).Get(key.Name)
			if err == nil && quitter.Waiting(pod) {
				ectx, ecancel := context.WithTimeout(ctx, 10*time.Second)
				if _, err := ex.Exec(ectx, key.Namespace, key.Name, keys.ProxyContainer, quitter.QuitArgv); err != nil && ctx.Err() == nil {
					errs.Add(1)
					q.AddRateLimited(key)
				} else {
					q.Forget(key)
				}
				ecancel()
			}
			q.Done(key)
		}
	}()
	return func() { cancel(); q.ShutDown(); <-done; f.Shutdown() }, errs, nil
}

// seen records, per pod, when a watch first saw its app terminated with
// the proxy still running: where every reaction clock starts. stop ends
// the watch (again, if it has) and returns those times.
func seen(ctx context.Context, cs kubernetes.Interface, ns string) (stop func() map[types.UID]time.Time, err error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := quitter.PodWatch(ctx, cs, ns, "")
	if err != nil {
		cancel()
		return nil, err
	}
	times := map[types.UID]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			now := time.Now()
			if pod, ok := ev.Object.(*corev1.Pod); ok && quitter.Waiting(pod) {
				if _, has := times[pod.UID]; !has {
					times[pod.UID] = now
				}
			}
		}
	}()
	return func() map[types.UID]time.Time { cancel(); <-done; return times }, nil
}
