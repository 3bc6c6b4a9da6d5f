//go:build e2e

package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/poll"
)

const (
	podsPerNamespace = 10 // the size of each of the many namespaces
	// The targets: with N namespaces, the API server's costs against one
	// namespace of as many pods, and the bridge's time to ready.
	nsRatioTarget = 1.1
	nsReadyTarget = 30 * time.Second
	// How many times the bridge is started in each of its arms; the
	// figures are the medians (docs/bench.md says why).
	nsStarts = 7
)

// nsArm is what one arm of namespaceScale measures; what it does not is
// left zero.
type nsArm struct {
	ran     bool // false: skipped, for the reason in skipped
	skipped string
	watches float64
	// open is from the start until every pod is listed, apiOpen the API
	// server's CPU over it: the bridge's median and least over nsStarts
	// starts (apiOpenLeast: 0 for the stand-in, opened once).
	open, apiOpen, apiOpenLeast time.Duration
	// apiWindow is the API server's CPU over the window, in which changes
	// status changes were written among the arm's pods.
	apiWindow time.Duration
	changes   int64
	apiGC     time.Duration // of apiWindow, the Go runtime's GC
	apiRSS    int64         // KiB, the median of the window's second half
	apiHeap   float64       // live bytes at its last GC, after the window (0: not exported)
	bridgeRSS int64         // KiB, settled after the start
	// Pods the bridge decoded by the time its RSS settled, and over the window.
	decodedStart, decodedWindow float64
	// Bytes the API server allocated: over a start (the median) and over
	// the window.
	allocOpen, allocWindow float64
}

// namespaceScale measures, for each size N of p.namespaces on the same
// control plane, what N opted-in namespaces of podsPerNamespace pods cost
// the API server in four arms (docs/bench.md): (a) no pod watch of
// istio-aux's; (b) one pod watch per namespace (perNamespaceWatches); (c)
// the bridge, deployed shape; (d) the same bridge with ONE opted-in
// namespace holding as many pods.
func namespaceScale(t *testing.T, c *cluster.Cluster, a *istioaux.IstioAux, cs kubernetes.Interface, p params, res *results) {
	for i, n := range p.namespaces {
		namespaceSize(t, c, a, cs, n, i == len(p.namespaces)-1, p, res)
	}
	// The stage's bridge runs again, as the part found it (nothing is
	// opted in any more).
	if err := a.StartBridgeAs(istioaux.Deployed); err != nil {
		t.Fatal(err)
	}
}

// namespaceSize runs the four arms with n namespaces, in the order of
// docs/bench.md: the pods of the one namespace (d) and of the many never
// coexist, as a pod labelled keys.LabelWatched (which the webhook would
// write) reaches the bridge's cluster-wide watch opted in or not. The many
// namespaces' pods are deleted unless last (the stage ends after them).
func namespaceSize(t *testing.T, c *cluster.Cluster, a *istioaux.IstioAux, cs kubernetes.Interface, n int, last bool, p params, res *results) {
	ctx := context.Background()
	total := n * podsPerNamespace
	prefix := fmt.Sprintf("bench-n%d", n)
	one := prefix + "-one"
	many := make([]string, n)
	var manyPods []podRef
	for i := range many {
		many[i] = fmt.Sprintf("%s-%05d", prefix, i)
		manyPods = append(manyPods, refs(many[i], "p", podsPerNamespace)...)
	}
	onePods := refs(one, "p", total)
	// Every namespace exists throughout, none opted in yet.
	all := append(slices.Clone(many), one)
	if err := parallel(len(all), 16, func(i int) error { return parkedNamespace(ctx, cs, all[i], nil) }); err != nil {
		t.Fatal(err)
	}
	// The bridge is stopped while pods are created: their creation is not
	// what is measured, and goes faster without a watcher.
	if err := a.StopBridge(); err != nil {
		t.Fatal(err)
	}
	// Protobuf: a hundred thousand pods are created and deleted, and JSON
	// would cost the API server and the test process more CPU per pod.
	pcs := fastClient(t, c, true)
	createWatchedPods := func(pods []podRef) error {
		return createPods(ctx, pcs, pods, true, func(_ int, p *corev1.Pod) { p.Labels[keys.LabelWatched] = "true" })
	}
	createdOne := timed(t, "created", len(onePods), func() error { return createWatchedPods(onePods) })
	logFootprint(t, c, cs)

	noneOne := apiWindow(t, c, cs, onePods, p, nsArm{ran: true})
	optIn(t, cs, []string{one}, true)
	d := bridgeArm(t, c, a, cs, onePods, p)
	optIn(t, cs, []string{one}, false)
	deleted := timed(t, "deleted", len(onePods), func() error { return deleteWatchedPods(ctx, pcs, onePods) })
	createdMany := timed(t, "created", len(manyPods), func() error { return createWatchedPods(manyPods) })
	logFootprint(t, c, cs)

	none := apiWindow(t, c, cs, manyPods, p, nsArm{ran: true})
	optIn(t, cs, many, true)
	bridge := bridgeArm(t, c, a, cs, manyPods, p)
	optIn(t, cs, many, false)
	perNS := nsArm{skipped: fmt.Sprintf("not run above N=%d (its watches' memory at the API server)", p.perNamespaceUpTo)}
	if n <= p.perNamespaceUpTo {
		perNS = perNamespaceArm(t, c, cs, many, manyPods, p)
	}
	if !last {
		timed(t, "deleted", len(manyPods), func() error { return deleteWatchedPods(ctx, pcs, manyPods) })
	}

	perK := func(d time.Duration, pods int) float64 { return d.Seconds() * 1000 / float64(pods) }
	res.add("namespaces", fmt.Sprintf("setup, N=%d: %d pods created (create + status) in 1 ns / in N ns; 1 ns's deleted", n, total),
		fmt.Sprintf("%.0f / %.0f s (%.1f / %.1f s per 1,000); %.0f s", createdOne.Seconds(), createdMany.Seconds(),
			perK(createdOne, total), perK(createdMany, total), deleted.Seconds()), "", "")
	nsRows(res, n, total, p, [4]nsArm{none, perNS, bridge, d}, noneOne)
}

// nsRows adds the rows of one size, arms in the order a, b, c, d;
// noneOne is the window without a watch on the one namespace's pods, just
// before (d).
func nsRows(res *results, n, total int, p params, arm [4]nsArm, noneOne nsArm) {
	arms := fmt.Sprintf("[N=%d ns of %d pods: no watch / per-ns watches / bridge / bridge on 1 ns of %d]", n, podsPerNamespace, total)
	// slots formats each arm's figure with f, "—" where it has none.
	slots := func(has func(nsArm) bool, f func(nsArm) string) string {
		out := make([]string, len(arm))
		for i, s := range arm {
			out[i] = "—"
			if s.ran && has(s) {
				out[i] = f(s)
			}
		}
		return strings.Join(out, " / ")
	}
	note := ""
	if !arm[1].ran {
		note = "; per-ns: " + arm[1].skipped
	}
	met := func(r float64) string {
		return verdict(arm[2].ran && arm[3].ran && r <= nsRatioTarget && !math.IsNaN(r))
	}
	target := fmt.Sprintf("≤ %.1fx", nsRatioTarget)
	always := func(nsArm) bool { return true }
	opens := func(s nsArm) bool { return s.open > 0 }
	bridged := func(s nsArm) bool { return s.bridgeRSS > 0 }

	res.add("namespaces", "pod WATCH requests open at the API server, all clients "+arms,
		slots(always, func(s nsArm) string { return fmt.Sprintf("%.0f", s.watches) })+note, "", "")

	r := arm[2].apiOpen.Seconds() / arm[3].apiOpen.Seconds()
	res.add("namespaces", fmt.Sprintf("API server CPU opening the pod watches, start until every pod listed (bridge: median (least) of %d starts) %s", nsStarts, arms),
		slots(opens, func(s nsArm) string {
			if s.apiOpenLeast == 0 {
				return fmt.Sprintf("%.2f", s.apiOpen.Seconds())
			}
			return fmt.Sprintf("%.2f (%.2f)", s.apiOpen.Seconds(), s.apiOpenLeast.Seconds())
		})+fmt.Sprintf(" CPU-s (c/d %.2fx)", r), target, met(r))

	mibs := func(b float64) string { return fmt.Sprintf("%.0f", b/(1<<20)) }
	r = arm[2].allocOpen / arm[3].allocOpen
	res.add("namespaces", "API server heap allocated opening the pod watches, the same starts (bridge: median) "+arms,
		slots(opens, func(s nsArm) string { return mibs(s.allocOpen) })+fmt.Sprintf(" MiB (c/d %.2fx)", r), "", "")

	slowest := max(arm[2].open, arm[3].open)
	res.add("namespaces", "start until every pod listed (bridge: ready, median) "+arms,
		slots(opens, func(s nsArm) string { return fmt.Sprintf("%.1f", s.open.Seconds()) })+" s",
		fmt.Sprintf("≤ %.0f s", nsReadyTarget.Seconds()), verdict(arm[2].ran && arm[3].ran && slowest <= nsReadyTarget))

	// Each bridge arm over the window without a watch just before it, on
	// the same pods (c over a, d over noneOne): docs/bench.md says why.
	rss := func(s nsArm) float64 { return float64(s.apiRSS) }
	r = (rss(arm[2]) / rss(arm[0])) / (rss(arm[3]) / rss(noneOne))
	res.add("namespaces", fmt.Sprintf("API server RSS over the second half of %.0f s of %d status changes/s %s; ratio: c/a over d/(no watch on 1 ns)", p.cpuWindow.Seconds(), p.outsideChurn, arms),
		slots(always, func(s nsArm) string { return fmt.Sprintf("%.1f", rss(s)/1024) })+
			fmt.Sprintf(" MiB; no watch on 1 ns %.1f MiB (%.2fx)", rss(noneOne)/1024, r), target, met(r))
	if arm[3].apiHeap > 0 {
		res.add("namespaces", "API server Go heap live at its last GC, same time "+arms,
			slots(always, func(s nsArm) string { return fmt.Sprintf("%.1f", s.apiHeap/(1<<20)) })+
				fmt.Sprintf(" MiB; no watch on 1 ns %.1f MiB", noneOne.apiHeap/(1<<20)), "", "")
	}

	perChange := func(cpu time.Duration, s nsArm) float64 {
		return float64(cpu.Microseconds()) / 1000 / float64(max(s.changes, 1))
	}
	noGC := func(s nsArm) float64 { return perChange(s.apiWindow-s.apiGC, s) }
	withGC := func(s nsArm) float64 { return perChange(s.apiWindow, s) }
	r = noGC(arm[2]) / noGC(arm[3])
	res.add("namespaces", fmt.Sprintf("API server CPU per status change without its GC (with it), %d/s for %.0f s %s", p.outsideChurn, p.cpuWindow.Seconds(), arms),
		slots(always, func(s nsArm) string { return fmt.Sprintf("%.2f", noGC(s)) })+
			" ("+slots(always, func(s nsArm) string { return fmt.Sprintf("%.2f", withGC(s)) })+
			fmt.Sprintf(") CPU-ms; no watch on 1 ns %.2f (%.2f) (c/d %.2fx)", noGC(noneOne), withGC(noneOne), r), target, met(r))

	perChangeKiB := func(s nsArm) string { return fmt.Sprintf("%.0f", s.allocWindow/1024/float64(max(s.changes, 1))) }
	res.add("namespaces", "API server heap allocated per status change, the same windows "+arms,
		slots(always, perChangeKiB)+fmt.Sprintf(" KiB; no watch on 1 ns %s KiB", perChangeKiB(noneOne)), "", "")

	res.add("namespaces", "bridge RSS, settled after its start "+arms,
		slots(bridged, func(s nsArm) string { return fmt.Sprintf("%.1f", float64(s.bridgeRSS)/1024) })+" MiB", "", "")
	res.add("namespaces", fmt.Sprintf("pods decoded by the bridge: at its start (%d pods) ; over the window (one per change) %s", total, arms),
		slots(bridged, func(s nsArm) string { return fmt.Sprintf("%.0f", s.decodedStart) })+" ; "+
			slots(bridged, func(s nsArm) string { return fmt.Sprintf("%.0f of %d", s.decodedWindow, s.changes) }), "", "")
}

// bridgeArm starts the bridge (deployed shape) nsStarts times on whatever
// is opted in, measuring each start (the medians are kept), then its RSS
// and a window of changes among pods, and stops it.
func bridgeArm(t *testing.T, c *cluster.Cluster, a *istioaux.IstioAux, cs kubernetes.Interface, pods []podRef, p params) nsArm {
	ctx := context.Background()
	api := c.Pids()["kube-apiserver"]
	s := nsArm{ran: true}
	var opens, cpus []time.Duration
	var allocs []float64
	for i := range nsStarts {
		if i > 0 {
			if err := a.StopBridge(); err != nil {
				t.Fatal(err)
			}
		}
		collectGarbage(t, cs, api)
		alloc0, gc0 := apiserverAllocs(t, cs), apiserverGC(t, cs) // before the CPU: each reads /metrics
		cpu0, start := cpuOf(t, api), time.Now()
		if err := a.StartBridgeAs(istioaux.Deployed); err != nil {
			t.Fatal(err)
		}
		opens, cpus = append(opens, time.Since(start)), append(cpus, cpuOf(t, api)-cpu0)
		allocs = append(allocs, apiserverAllocs(t, cs)-alloc0)
		decoded := decodedPods(t, a)
		t.Logf("namespaces: bridge ready after %v with %.0f of %d pods decoded, API server CPU %v (its GC's so far %v), %.0f MiB allocated",
			opens[i], decoded, len(pods), cpus[i], apiserverGC(t, cs)-gc0, allocs[i]/(1<<20))
	}
	s.open, s.apiOpen, s.apiOpenLeast = percentile(opens, 0.5), percentile(cpus, 0.5), slices.Min(cpus)
	slices.Sort(allocs)
	s.allocOpen = allocs[len(allocs)/2]
	_, pid := a.Pids()
	var err error
	if s.bridgeRSS, err = settledRSS(ctx, pid); err != nil {
		t.Fatalf("bridge RSS: %v", err)
	}
	s.decodedStart = decodedPods(t, a)
	s = apiWindow(t, c, cs, pods, p, s)
	s.decodedWindow = decodedSince(t, a, s.decodedStart, s.changes)
	if err := a.StopBridge(); err != nil {
		t.Fatal(err)
	}
	return s
}

// perNamespaceArm opens perNamespaceWatches on names, timing until every
// pod is listed (at most perNamespaceDeadline: past it the arm is
// skipped), then measures a window of changes among pods.
func perNamespaceArm(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, names []string, pods []podRef, p params) nsArm {
	ctx := context.Background()
	api := c.Pids()["kube-apiserver"]
	s := nsArm{ran: true}
	collectGarbage(t, cs, api)
	alloc0 := apiserverAllocs(t, cs)
	cpu0, start := cpuOf(t, api), time.Now()
	listed, stop, err := openPerNamespaceWatches(c.RESTConfig(), names)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	err = poll.Until(ctx, perNamespaceDeadline, func(context.Context) (bool, error) {
		return listed() == len(names), nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		t.Logf("namespaces: per-namespace watches: %d of %d listed after %v: arm skipped", listed(), len(names), perNamespaceDeadline)
		return nsArm{skipped: fmt.Sprintf("%d of %d listed after %v, skipped", listed(), len(names), perNamespaceDeadline)}
	} else if err != nil {
		t.Fatal(err)
	}
	s.open, s.apiOpen = time.Since(start), cpuOf(t, api)-cpu0
	s.allocOpen = apiserverAllocs(t, cs) - alloc0
	t.Logf("namespaces: %d per-namespace watches listed after %v, API server CPU %v", len(names), s.open, s.apiOpen)
	return apiWindow(t, c, cs, pods, p, s)
}

// timed runs f, logs how long it took for n pods, and returns that.
func timed(t *testing.T, what string, n int, f func() error) time.Duration {
	start := time.Now()
	if err := f(); err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("namespaces: %d pods %s in %v (%.1f s per 1,000)", n, what, d.Round(time.Millisecond), d.Seconds()*1000/float64(n))
	return d
}

// deleteWatchedPods deletes pods at once (no grace: no kubelet would
// confirm), with 16 clients, and checks that no labelled pod is left.
func deleteWatchedPods(ctx context.Context, cs kubernetes.Interface, pods []podRef) error {
	zero := int64(0)
	if err := parallel(len(pods), 16, func(i int) error {
		err := cs.CoreV1().Pods(pods[i].ns).Delete(ctx, pods[i].name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s/%s: %w", pods[i].ns, pods[i].name, err)
		}
		return nil
	}); err != nil {
		return err
	}
	return poll.Until(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: keys.LabelWatched + "=true", Limit: 1})
		if err != nil {
			return false, err
		}
		return len(l.Items) == 0, fmt.Errorf("labelled pods left")
	})
}
