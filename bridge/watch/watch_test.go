package watch_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"

	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/publish"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// sink records the pod states (event ids) the function would see.
type sink struct {
	mu   sync.Mutex
	seen map[string]int // event id -> deliveries
}

func (s *sink) Handle(_ context.Context, e cloudevents.Event) cloudevents.Result {
	if _, err := podevent.Decode(e); err != nil {
		return cehttp.NewResult(http.StatusBadRequest, "%v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[e.ID()]++
	return cehttp.NewResult(http.StatusOK, "ok")
}

func (s *sink) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[id]
}

func (s *sink) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.seen {
		n += c
	}
	return n
}

// cluster is a fake API server whose pods we move through their lifecycle,
// setting resourceVersions ourselves (the fake tracker does not).
type cluster struct {
	t      *testing.T
	client *fake.Clientset
	rv     int
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t, client: fake.NewClientset()}
	c.namespace("jobs", map[string]string{keys.LabelEnabled: "true"})
	c.namespace("plain", nil)
	return c
}

func (c *cluster) nextRV() string { c.rv++; return strconv.Itoa(c.rv) }

func (c *cluster) namespace(name string, labels map[string]string) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, ResourceVersion: c.nextRV()}}
	if _, err := c.client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) relabel(name string, labels map[string]string) {
	ns, err := c.client.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	ns.Labels, ns.ResourceVersion = labels, c.nextRV()
	if _, err := c.client.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// createJob creates a Never pod whose app is running, changed by mutate,
// through the webhook: labelled keys.LabelWatched if it is opted in.
func (c *cluster) createJob(ns, name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	return c.create(ns, name, true, mutate...)
}

// createStray creates the same pod as createJob without the webhook (it
// was down, or the namespace was not opted in yet): never labelled.
func (c *cluster) createStray(ns, name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	return c.create(ns, name, false, mutate...)
}

func (c *cluster) create(ns, name string, webhook bool, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), ResourceVersion: c.nextRV(),
			Annotations: map[string]string{"sidecar.istio.io/status": "{...}"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "istio-proxy", Image: "proxyv2"}, {Name: "app", Image: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "istio-proxy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	for _, m := range mutate {
		m(p)
	}
	if webhook {
		// The webhook's rule (admission.Mutate): its selectors let in the pods
		// of namespaces in scope, and it labels those opted in.
		n, err := c.client.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		if watch.Serves(n.Labels, p.Labels, p.Annotations) {
			if p.Labels == nil {
				p.Labels = map[string]string{}
			}
			p.Labels[keys.LabelWatched] = "true"
		}
	}
	p, err := c.client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// update applies mutate to the live pod with a new resourceVersion and
// returns the id of the resulting state.
func (c *cluster) update(ns, name string, mutate func(*corev1.Pod)) string {
	p, err := c.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	mutate(p)
	p.ResourceVersion = c.nextRV()
	if _, err := c.client.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	return podevent.ID(p.UID, p.ResourceVersion)
}

func appExits(code int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses[1].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}
	}
}

func readiness(p *corev1.Pod) {
	p.Status.ContainerStatuses[0].Ready = !p.Status.ContainerStatuses[0].Ready
}

// bridge runs a watcher and its publisher until stop is called.
type bridge struct {
	nc    *nats.Conn
	m     *metrics.Bridge
	w     *watch.Watcher
	lists *testenv.Lists
	stop  func()
	// ran receives Run's result if it returns before stop.
	ran chan error
}

func startBridge(t *testing.T, ctx context.Context, client kubernetes.Interface, url string, o watch.Options) *bridge {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	nc := testenv.Connect(t, url)
	js, err := publish.NewJetStream(nc, 128)
	if err != nil {
		t.Fatal(err)
	}
	b := &bridge{nc: nc, m: metrics.NewBridge(nil), ran: make(chan error, 1)}
	pub := publish.New(nc, js, b.m, transport.DefaultName, 128)
	if o.Source == "" {
		o.Source = "test"
	}
	if o.RateLimiter == nil {
		o.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 100*time.Millisecond)
	}
	b.lists = testenv.NewLists(client, watch.PodFieldSelector)
	b.w = watch.New(b.lists.Lists, pub, b.m, o)
	var wg sync.WaitGroup
	wg.Go(func() { _ = pub.Run(ctx) })
	wg.Go(func() { b.ran <- b.w.Run(ctx) })
	b.stop = func() { cancel(); wg.Wait(); nc.Close() }
	t.Cleanup(b.stop)
	testenv.Eventually(t, 5*time.Second, "caches to sync", func() bool {
		select {
		case err := <-b.ran:
			t.Fatalf("the watcher stopped before its caches synced: %v", err)
		default:
		}
		return b.w.Synced()
	})
	return b
}

// delivering is the usual setup: an embedded nats-server, a dispatcher
// delivering to a new sink, a fake cluster (newCluster's namespaces, then
// whatever prepare adds) and a bridge watching it.
func delivering(t *testing.T, o watch.Options, prepare ...func(*cluster)) (*cluster, *bridge, *sink) {
	t.Helper()
	ctx := testenv.Context(t)
	srv := testenv.StartServer(t)
	s := &sink{seen: map[string]int{}}
	startDispatcher(t, ctx, srv.URL(), s)
	c := newCluster(t)
	for _, p := range prepare {
		p(c)
	}
	return c, startBridge(t, ctx, c.client, srv.URL(), o), s
}

func startDispatcher(t *testing.T, ctx context.Context, url string, s *sink) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	nc := testenv.Connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := transport.Ensure(ctx, js, transport.DefaultName); err != nil {
		t.Fatal(err)
	}
	d := dispatch.New(js, dispatch.SinkFunc(s.Handle), metrics.NewDispatch(nil), dispatch.Options{
		Consumer:  transport.ConsumerOptions{MaxAckPending: 16, MaxDeliver: 10, AckWait: 2 * time.Second},
		BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond,
	})
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestWatchPublishDispatch(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartServer(t)
	s := &sink{seen: map[string]int{}}
	startDispatcher(t, ctx, srv.URL(), s) // also creates the stream
	c := newCluster(t)
	c.createJob("jobs", "early")
	earlyDone := c.update("jobs", "early", appExits(0)) // finished before the bridge started
	b := startBridge(t, ctx, c.client, srv.URL(), watch.Options{})

	c.createJob("jobs", "job")
	c.createJob("plain", "other")
	c.update("jobs", "job", readiness) // a Wait state: not published in quit mode
	jobDone := c.update("jobs", "job", appExits(0))
	jobChurned := c.update("jobs", "job", readiness) // churn after quitting: same fingerprint
	c.update("plain", "other", appExits(0))

	// The queue is keyed by pod (level-triggered): a worker that reads the
	// pod only after the churn publishes the same finished state under the
	// churn's resourceVersion. Either id is that one state, delivered once.
	testenv.Eventually(t, 5*time.Second, "both finished opted-in pods", func() bool {
		return s.count(earlyDone) == 1 && s.count(jobDone)+s.count(jobChurned) == 1
	})
	// The three updates of "job"; "other" is in a namespace not opted in,
	// whose pods are not watched.
	testenv.Eventually(t, 5*time.Second, "the filter to see every update", func() bool {
		return testutil.ToFloat64(b.m.WatchEvents.WithLabelValues("pod", "update")) == 3
	})
	if got := s.total(); got != 2 {
		t.Errorf("function saw %d events, want 2: %v", got, s.seen)
	}
	// The function can see an event before the bridge has settled its
	// ack (publish.Publisher.Run): wait for the count, then hold it exact.
	testenv.Eventually(t, 5*time.Second, "both events acknowledged as stored", func() bool {
		return testutil.ToFloat64(b.m.Published) >= 2
	})
	if got := testutil.ToFloat64(b.m.Published); got != 2 {
		t.Errorf("published %v, want 2", got)
	}

	// Opting the other namespace in reaches its already finished pod.
	c.relabel("plain", map[string]string{keys.LegacyLabel: keys.LegacyLabelValue})
	testenv.Eventually(t, 5*time.Second, "the newly opted-in pod", func() bool { return s.total() == 3 })

	// A restarted bridge (fresh informer, empty memory) republishes the
	// three Quit pods; JetStream drops them as duplicates, including "job"
	// whose resourceVersion moved on (readiness churn) since it was
	// published: the dedup id is the state, not the resourceVersion.
	b.stop()
	b2 := startBridge(t, ctx, c.client, srv.URL(), watch.Options{})
	testenv.Eventually(t, 5*time.Second, "republishes to be deduplicated", func() bool {
		return testutil.ToFloat64(b2.m.Deduplicated) == 3
	})
	if got := testutil.ToFloat64(b2.m.Published); got != 0 {
		t.Errorf("restarted bridge stored %v new events, want 0", got)
	}
	// A new state after the restart is still delivered, exactly once.
	c.createJob("jobs", "late")
	lateDone := c.update("jobs", "late", appExits(0))
	testenv.Eventually(t, 5*time.Second, "the late pod", func() bool { return s.count(lateDone) == 1 })
	if got := s.total(); got != 4 {
		t.Errorf("function saw %d events, want 4 (each pod once per state): %v", got, s.seen)
	}
}

func TestPublishWaitsPublishesWaitStates(t *testing.T) {
	c, _, s := delivering(t, watch.Options{PublishWaits: true})
	job := c.createJob("jobs", "job")
	created := podevent.ID(job.UID, job.ResourceVersion)
	// The queue is keyed by pod (level-triggered): a state superseded
	// before a worker reads it is never published, so let each land first.
	testenv.Eventually(t, 5*time.Second, "the running state", func() bool { return s.count(created) == 1 })
	c.update("jobs", "job", readiness) // same fingerprint: not published
	failed := c.update("jobs", "job", appExits(1))
	testenv.Eventually(t, 5*time.Second, "the failed state", func() bool { return s.count(failed) == 1 })
	if got := s.total(); got != 2 {
		t.Errorf("function saw %v, want the running and the terminated state", s.seen)
	}
}

func TestResyncRepublishesQuitPods(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartServer(t)
	c := newCluster(t)
	c.createJob("jobs", "done")
	c.update("jobs", "done", appExits(0))
	c.createJob("jobs", "running")
	nc := testenv.Connect(t, srv.URL())
	js, _ := jetstream.New(nc)
	if _, err := transport.Ensure(ctx, js, transport.DefaultName); err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, ctx, c.client, srv.URL(), watch.Options{Resync: 50 * time.Millisecond})
	// Each resync hands the Quit pod to the publisher again (JetStream
	// dedups within its window); the running pod never is.
	testenv.Eventually(t, 5*time.Second, "several resyncs", func() bool {
		return testutil.ToFloat64(b.m.Deduplicated) >= 2
	})
	if got := testutil.ToFloat64(b.m.Published); got != 1 {
		t.Errorf("published %v, want 1", got)
	}
	if n := testutil.ToFloat64(b.m.Filtered.WithLabelValues("waiting")); n != 1 {
		t.Errorf("the running pod was evaluated %v times, want once (at start)", n)
	}
}

func TestNATSRestartLosesNothing(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartServer(t)
	s := &sink{seen: map[string]int{}}
	c := newCluster(t)
	nc := testenv.Connect(t, srv.URL())
	js, _ := jetstream.New(nc)
	if _, err := transport.Ensure(ctx, js, transport.DefaultName); err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, ctx, c.client, srv.URL(), watch.Options{})

	// Stored before the outage, not yet consumed (no dispatcher yet).
	var want []string
	for i := range 5 {
		name := fmt.Sprintf("before-%d", i)
		c.createJob("jobs", name)
		want = append(want, c.update("jobs", name, appExits(0)))
	}
	testenv.Eventually(t, 5*time.Second, "events stored", func() bool { return testutil.ToFloat64(b.m.Published) == 5 })

	srv.Shutdown()
	testenv.Eventually(t, 5*time.Second, "the bridge to notice", func() bool { return !nc.IsConnected() })
	for i := range 5 {
		name := fmt.Sprintf("during-%d", i)
		c.createJob("jobs", name)
		want = append(want, c.update("jobs", name, appExits(0)))
	}
	testenv.Eventually(t, 5*time.Second, "publishes to fail and be retried", func() bool {
		return testutil.ToFloat64(b.m.Retries) >= 5
	})
	srv.Start()
	startDispatcher(t, ctx, srv.URL(), s)
	testenv.Eventually(t, 10*time.Second, "every event after the restart", func() bool {
		for _, id := range want {
			if s.count(id) == 0 {
				return false
			}
		}
		return true
	})
	for _, id := range want {
		if n := s.count(id); n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
}

// TestRetryNowSkipsTheBackOff: pods whose publish failed while NATS was
// down wait out their back-off (here a minute), unless RetryNow (what the
// bridge calls on reconnecting) queues them at once.
func TestRetryNowSkipsTheBackOff(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartServer(t)
	c := newCluster(t)
	js, _ := jetstream.New(testenv.Connect(t, srv.URL()))
	if _, err := transport.Ensure(ctx, js, transport.DefaultName); err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, ctx, c.client, srv.URL(), watch.Options{
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Minute, time.Minute)})
	srv.Shutdown()
	testenv.Eventually(t, 5*time.Second, "the bridge to notice", func() bool { return !b.nc.IsConnected() })
	for i := range 5 {
		name := fmt.Sprintf("during-%d", i)
		c.createJob("jobs", name)
		c.update("jobs", name, appExits(0))
	}
	testenv.Eventually(t, 5*time.Second, "each publish to fail once", func() bool { return testutil.ToFloat64(b.m.Retries) >= 5 })
	srv.Start()
	testenv.Eventually(t, 10*time.Second, "the stream to answer", func() bool {
		_, err := js.Stream(ctx, transport.DefaultName)
		return b.nc.IsConnected() && err == nil
	})
	start := time.Now()
	b.w.RetryNow()
	testenv.Eventually(t, 10*time.Second, "the five events, well before the minute's back-off", func() bool {
		return testutil.ToFloat64(b.m.Published) == 5
	})
	t.Logf("published %s after RetryNow", time.Since(start).Round(time.Millisecond))
}

// TestAnnotationChurnMakesOneEvent: on a finished pod whose proxy still
// runs, rewriting the sidecars annotation (names of no container of the
// pod, respellings) is not a new state: one event in all, not one per
// update, so churn cannot make the function exec again and again.
func TestAnnotationChurnMakesOneEvent(t *testing.T) {
	c, b, s := delivering(t, watch.Options{})
	c.createJob("jobs", "job")
	c.update("jobs", "job", appExits(0))
	testenv.Eventually(t, 5*time.Second, "the finished pod's event", func() bool { return s.total() == 1 })
	for i := range 50 {
		c.update("jobs", "job", func(p *corev1.Pod) {
			p.Annotations[keys.AnnotationSidecars] = fmt.Sprintf(" nope-%d, ,also-not-%d", i, i%3)
		})
	}
	testenv.Eventually(t, 5*time.Second, "the filter to see every update", func() bool {
		return testutil.ToFloat64(b.m.WatchEvents.WithLabelValues("pod", "update")) == 51
	})
	// The function can see the event before the bridge has settled its ack.
	testenv.Eventually(t, 5*time.Second, "the event acknowledged as stored", func() bool {
		return testutil.ToFloat64(b.m.Published) >= 1
	})
	if got := testutil.ToFloat64(b.m.Published); got != 1 {
		t.Errorf("published %v events for one state, want 1", got)
	}
	if got := s.total(); got != 1 {
		t.Errorf("the function saw %d events, want 1", got)
	}
}

// TestReconfigureAppliesAtOnce: a change of the sidecars setting reaches the
// pods already cached, without waiting for a resync period: a pod whose
// log shipper keeps running waits while the shipper counts as an app, and
// is published as soon as the setting says it is a sidecar. The resync
// period changes too.
func TestReconfigureAppliesAtOnce(t *testing.T) {
	c, b, s := delivering(t, watch.Options{Resync: time.Hour})
	c.createJob("jobs", "shipped", func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "log-shipper", Image: "fluent-bit"})
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses,
			corev1.ContainerStatus{Name: "log-shipper", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	})
	waiting := func() float64 { return testutil.ToFloat64(b.m.Filtered.WithLabelValues(watch.ReasonWaiting)) }
	testenv.Eventually(t, 5*time.Second, "the running pod to be filtered", func() bool { return waiting() == 1 })
	done := c.update("jobs", "shipped", appExits(0))
	testenv.Eventually(t, 5*time.Second, "the exited app to be filtered: waiting for log-shipper", func() bool { return waiting() == 2 })
	if got := s.total(); got != 0 {
		t.Fatalf("published %v while log-shipper counts as an app", s.seen)
	}
	b.w.Reconfigure(decision.Options{ExtraSidecars: []string{"log-shipper"}}, time.Hour)
	testenv.Eventually(t, 5*time.Second, "the pod published once log-shipper is a sidecar", func() bool { return s.count(done) == 1 })

	// A shorter period applies from now, not after the hour.
	before := testutil.ToFloat64(b.m.WatchEvents.WithLabelValues("pod", "resync"))
	b.w.Reconfigure(decision.Options{ExtraSidecars: []string{"log-shipper"}}, 50*time.Millisecond)
	testenv.Eventually(t, 5*time.Second, "a resync at the new period", func() bool {
		return testutil.ToFloat64(b.m.WatchEvents.WithLabelValues("pod", "resync")) > before
	})
}
