//go:build e2e

package ha

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// load is what the faults happen under: one-pod Jobs created at a steady
// rate in an opted-in namespace with Istio's injection, each app
// downloading through its proxy at start (it fails without the hold) and
// running a few seconds. A watch of the namespace's pods notes, for every
// pod, when its app and its proxy were first seen terminated.
//
// At most maxInFlight Jobs are under way (created, their proxy not yet
// seen quit): a tick that finds that many creates none. Three nodes on
// two shared cores keep up with the steady rate, but not with it and a
// fault's aftermath at once (every kubelet and controller relisting
// after kube-apiserver's restart, a node's pods started again after its
// power-off): Jobs created faster than they finish start ever slower, and
// the backlog fed itself until the machine, not istio-aux, stalled every
// Job for minutes (seen in TestHAFaults runs on this machine). A quit
// that stalls still shows: its Job stays in flight and its pod's quit is
// measured as before.
type load struct {
	c      *cluster.Cluster
	ns     string
	every  time.Duration
	runFor string
	limit  int // maxInFlight
	mu     sync.Mutex
	avoid  string // the node new Jobs must keep off, "" for none
	// heldBack counts the ticks that created no Job: limit Jobs in flight.
	heldBack int
	jobs     []string
	// jobAt is when each Job was created: its pod's creation after it is
	// what a refused admission costs (the Job controller's retries).
	jobAt    map[string]time.Time
	pods     map[string]*tracked
	stopLoad context.CancelFunc
	stopped  chan struct{}
	stopPods context.CancelFunc
}

// tracked is one pod of the load, as the watch saw it.
type tracked struct {
	name, job, node string
	// created is the pod's creation, jobAt its Job's (both as the API
	// server stamped them: whole seconds).
	created, jobAt time.Time
	// held: Istio injected the proxy first with `pilot-agent wait`, which
	// is what the webhook's hold asks for.
	held bool
	// appExit and quit are when the apps' success and the proxy's
	// termination were first seen; early is set if the proxy was seen
	// terminated while an app was not done.
	appExit, quit time.Time
	early         bool
}

// startLoad creates the namespace and starts creating Jobs, one every
// every, each running runFor, at most limit of them in flight.
func startLoad(t *testing.T, c *cluster.Cluster, every time.Duration, runFor string, limit int) *load {
	t.Helper()
	l := &load{c: c, every: every, runFor: runFor, limit: limit, pods: map[string]*tracked{}, jobAt: map[string]time.Time{}, stopped: make(chan struct{})}
	l.ns = mesh.Namespace(t, c, "", true, mesh.OptedIn)
	pctx, stopPods := context.WithCancel(context.Background())
	l.stopPods = stopPods
	l.watchPods(pctx)
	ctx, stop := context.WithCancel(context.Background())
	l.stopLoad = stop
	go l.run(ctx)
	t.Cleanup(func() { l.stop(); stopPods() })
	return l
}

// run creates a Job every l.every until ctx is done.
func (l *load) run(ctx context.Context) {
	defer close(l.stopped)
	tick := time.NewTicker(l.every)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		name := fmt.Sprintf("job-%d", i)
		j := mesh.TrainingJob(name, 1, corev1.RestartPolicyOnFailure, mesh.App{RunFor: l.runFor}, nil)
		l.mu.Lock()
		if l.inFlight() >= l.limit {
			l.heldBack++
			l.mu.Unlock()
			continue
		}
		if l.avoid != "" {
			j.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{l.avoid}}},
				}}}}}
		}
		l.mu.Unlock()
		// The API server may be down (a fault): the Job is created once it
		// is back, as a CronJob's would be.
		var at time.Time
		err := poll.Until(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
			created, err := l.c.Client().BatchV1().Jobs(l.ns).Create(ctx, j, metav1.CreateOptions{})
			if err == nil {
				at = created.CreationTimestamp.Time
			}
			return err == nil, err
		})
		if err == nil {
			l.mu.Lock()
			l.jobs = append(l.jobs, name)
			l.jobAt[name] = at
			l.mu.Unlock()
		}
	}
}

// keepOff makes new Jobs keep off node ("" for none) and waits until no
// pod of the load runs there any more: the fault then hits only istio-aux,
// and the Jobs finish on the surviving nodes.
func (l *load) keepOff(t *testing.T, node string) {
	t.Helper()
	l.mu.Lock()
	l.avoid = node
	l.mu.Unlock()
	if node == "" {
		return
	}
	err := poll.Until(context.Background(), 2*time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := l.c.Client().CoreV1().Pods(l.ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				return false, fmt.Errorf("%s still runs there", p.Name)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the load's pods did not leave %s: %v", node, err)
	}
}

// inFlight is how many Jobs are under way: created, and no pod of theirs
// seen with its proxy quit. Called with mu held.
func (l *load) inFlight() int {
	quit := map[string]bool{}
	for _, tr := range l.pods {
		if !tr.quit.IsZero() {
			quit[tr.job] = true
		}
	}
	n := 0
	for _, j := range l.jobs {
		if !quit[j] {
			n++
		}
	}
	return n
}

// held is how many ticks so far created no Job (limit Jobs in flight).
func (l *load) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldBack
}

func (l *load) stop() {
	l.stopLoad()
	<-l.stopped
}

// watchPods notes every pod of the load as the API server reports it.
func (l *load) watchPods(ctx context.Context) {
	lw := cache.NewListWatchFromClient(l.c.Client().CoreV1().RESTClient(), "pods", l.ns, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	note := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			l.note(p, time.Now())
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) }})
	go inf.RunWithContext(ctx)
}

func (l *load) note(p *corev1.Pod, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tr := l.pods[p.Name]
	if tr == nil {
		tr = &tracked{name: p.Name, job: p.Labels["job-name"], created: p.CreationTimestamp.Time, held: mesh.ProxyFirstWithHold(p)}
		tr.jobAt = l.jobAt[tr.job]
		l.pods[p.Name] = tr
	}
	if p.Spec.NodeName != "" {
		tr.node = p.Spec.NodeName
	}
	appsDone := len(p.Status.ContainerStatuses) > 1
	proxyDone := false
	for _, s := range p.Status.ContainerStatuses {
		switch {
		case s.Name == keys.ProxyContainer:
			proxyDone = s.State.Terminated != nil
		case s.State.Terminated == nil || s.State.Terminated.ExitCode != 0:
			// An app that failed runs again (OnFailure): not done.
			appsDone = false
		}
	}
	if appsDone && tr.appExit.IsZero() {
		tr.appExit = now
	}
	if proxyDone && tr.quit.IsZero() {
		tr.quit = now
		tr.early = !appsDone
	}
}

// snapshot is a copy of what the watch noted, sorted by creation.
func (l *load) snapshot() []tracked {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]tracked, 0, len(l.pods))
	for _, tr := range l.pods {
		out = append(out, *tr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].created.Before(out[j].created) })
	return out
}

// settle waits until every Job created so far has completed, and every one
// of their pods has been seen quit: no quit lost. It returns those Jobs,
// or what was still missing at timeout.
func (l *load) settle(timeout time.Duration) (map[string]bool, error) {
	l.mu.Lock()
	jobs := slices.Clone(l.jobs)
	l.mu.Unlock()
	var pending []string
	err := poll.Until(context.Background(), timeout, func(ctx context.Context) (bool, error) {
		list, err := l.c.Client().BatchV1().Jobs(l.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		done := map[string]bool{}
		for _, j := range list.Items {
			done[j.Name] = mesh.JobHas(&j, batchv1.JobComplete)
		}
		pending = pending[:0]
		for _, j := range jobs {
			if !done[j] {
				pending = append(pending, j)
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("Jobs not complete: %v (%w)", pending, err)
	}
	settled := map[string]bool{}
	for _, j := range jobs {
		settled[j] = true
	}
	// A pod that succeeded had its proxy quit; the watch may not have said
	// so yet.
	err = poll.Until(context.Background(), 30*time.Second, func(context.Context) (bool, error) {
		for _, p := range l.snapshot() {
			if settled[p.job] && !p.appExit.IsZero() && p.quit.IsZero() {
				return false, fmt.Errorf("%s: no quit seen", p.name)
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("pods of completed Jobs: %w", err)
	}
	return settled, nil
}

// refusals counts the Job controller's FailedCreate Events: pods the API
// server refused (a webhook that did not answer, with failurePolicy Fail).
func (l *load) refusals(t *testing.T) int32 {
	t.Helper()
	evs, err := l.c.Client().CoreV1().Events(l.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", "FailedCreate").String()})
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, e := range evs.Items {
		n += max(e.Count, 1)
	}
	return n
}

// quitEvents counts the ProxyQuit Events of each pod of the load.
func (l *load) quitEvents(t *testing.T) map[string]int32 {
	t.Helper()
	evs, err := l.c.Client().CoreV1().Events(l.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", "ProxyQuit").String()})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, e := range evs.Items {
		out[e.InvolvedObject.Name] += max(e.Count, 1)
	}
	return out
}

// eventsOf is what the Events of a pod of the load say, reason and message.
func (l *load) eventsOf(t *testing.T, pod string) string {
	t.Helper()
	evs, err := l.c.Client().CoreV1().Events(l.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String()})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "\n        %s (%s): %s", e.Reason, e.Source.Component+e.ReportingController, e.Message)
	}
	return b.String()
}
