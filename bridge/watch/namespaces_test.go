package watch_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/pkg/keys"
)

var (
	optedIn   = map[string]string{keys.LabelEnabled: "true"}
	podsOptIn = map[string]string{keys.LabelEnabled: keys.LabelEnabledPods}
)

func labelled(value string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[keys.LabelEnabled] = value
	}
}

func annotated(value string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[keys.AnnotationEnabled] = value }
}

func decoded(b *bridge) int { return int(testutil.ToFloat64(b.m.PodsDecoded)) }

func watched(b *bridge, scope string) int {
	return int(testutil.ToFloat64(b.m.WatchedNamespaces.WithLabelValues(scope)))
}

// TestNamespaceOptedInAfterItsPodsFinished: a namespace's pods run, finish
// and churn while it is not opted in, unseen (not labelled by the webhook,
// nothing decoded); labelled, the namespace's pods are looked for, its
// finished pods get their quits at once, and its running pod its own when it
// finishes.
func TestNamespaceOptedInAfterItsPodsFinished(t *testing.T) {
	c, b, s := delivering(t, watch.Options{})

	for _, name := range []string{"a", "b", "running"} {
		c.createJob("plain", name)
	}
	aDone := c.update("plain", "a", appExits(0))
	c.update("plain", "b", appExits(0))
	bDone := c.update("plain", "b", readiness) // churn after it finished
	c.update("plain", "running", readiness)
	if b.lists.Watching("plain") || decoded(b) != 0 {
		t.Fatalf("namespace not opted in: watching %v, %d pods decoded", b.lists.Watching("plain"), decoded(b))
	}

	c.relabel("plain", optedIn)
	testenv.Eventually(t, 5*time.Second, "the quits of the pods that finished before", func() bool {
		return s.count(aDone) == 1 && s.count(bDone) == 1
	})
	if got := decoded(b); got != 3 {
		t.Errorf("opting in decoded %d pods, want the namespace's 3, once each", got)
	}
	testenv.Eventually(t, 5*time.Second, "the watch to follow the list", func() bool { return b.lists.Watching("plain") })
	runDone := c.update("plain", "running", appExits(0))
	testenv.Eventually(t, 5*time.Second, "the quit of the pod that finished after", func() bool { return s.count(runDone) == 1 })
	if got := s.total(); got != 3 {
		t.Errorf("the function saw %d events, want 3: %v", got, s.seen)
	}
}

// TestNamespaceOptedOutStopsItsQuits: unlabelled, a namespace is out of
// scope: its pods that finish get no quit (the webhook labelled them while
// it was opted in, so the cluster-wide watch still brings them, until they
// end). Opted in again, the pod that finished meanwhile gets its quit, and
// the one quit before is not delivered twice.
func TestNamespaceOptedOutStopsItsQuits(t *testing.T) {
	c, b, s := delivering(t, watch.Options{})

	c.createJob("jobs", "first")
	firstDone := c.update("jobs", "first", appExits(0))
	c.createJob("jobs", "second")
	testenv.Eventually(t, 5*time.Second, "the first quit", func() bool { return s.count(firstDone) == 1 })
	testenv.Eventually(t, 5*time.Second, "both pods cached", func() bool { return b.w.CachedPods() == 2 })

	c.relabel("jobs", nil)
	testenv.Eventually(t, 5*time.Second, "the namespace out of scope", func() bool { return watched(b, "all") == 0 })
	secondDone := c.update("jobs", "second", appExits(0))
	// A namespace still opted in is the sync point: its quit arrives, the
	// unlabelled namespace's does not.
	c.namespace("other", optedIn)
	c.createJob("other", "x")
	xDone := c.update("other", "x", appExits(0))
	testenv.Eventually(t, 5*time.Second, "the other namespace's quit", func() bool { return s.count(xDone) == 1 })
	if s.count(secondDone) != 0 {
		t.Error("a pod of an unlabelled namespace got its quit")
	}

	c.relabel("jobs", optedIn)
	testenv.Eventually(t, 5*time.Second, "the quit of the pod that finished while opted out", func() bool {
		return s.count(secondDone) == 1
	})
	testenv.Eventually(t, 5*time.Second, "the first pod's republish to be dropped as a duplicate", func() bool {
		return testutil.ToFloat64(b.m.Deduplicated) == 1
	})
	if got := s.total(); got != 3 {
		t.Errorf("the function saw %d events, want 3, each pod once: %v", got, s.seen)
	}
}

// TestPodsOptInByLabel: in a namespace labelled istio-aux.dev/enabled=pods
// only pods labelled istio-aux.dev/enabled=true (exactly, as the webhook's
// selector) are served, and the annotation still opts one out (the webhook
// does not label it: it is never decoded). Opted in as a whole, the
// namespace's other pods are looked for and reach the bridge.
func TestPodsOptInByLabel(t *testing.T) {
	c, b, s := delivering(t, watch.Options{}, func(c *cluster) { c.namespace("team", podsOptIn) })
	if watched(b, "labelled") != 1 {
		t.Fatalf("watching %d namespaces by label, want 1", watched(b, "labelled"))
	}

	c.createJob("team", "in", labelled("true"))
	inDone := c.update("team", "in", appExits(0))
	c.createJob("team", "out", labelled("true"), annotated("false"))
	c.update("team", "out", appExits(0))
	c.createJob("team", "plain")
	plainDone := c.update("team", "plain", appExits(0))
	c.createJob("team", "capital", labelled("True"))
	capitalDone := c.update("team", "capital", appExits(0))
	testenv.Eventually(t, 5*time.Second, "the labelled pod's quit", func() bool { return s.count(inDone) == 1 })
	if got := decoded(b); got != 2 {
		t.Errorf("decoded %d pod objects, want 2: the pod the webhook labelled, created and updated", got)
	}

	c.relabel("team", optedIn)
	testenv.Eventually(t, 5*time.Second, "the other pods' quits", func() bool {
		return s.count(plainDone) == 1 && s.count(capitalDone) == 1
	})
	testenv.Eventually(t, 5*time.Second, "the namespace's four pods listed", func() bool { return b.w.CachedPods() == 4 })
	if got := s.total(); got != 3 {
		t.Errorf("the function saw %d events, want 3 (not the opted-out pod, no pod twice): %v", got, s.seen)
	}
}

// TestOutsideTheOptInIsNeverDecoded counts every pod object the watches
// decode while pods churn inside and outside the opt-in: only the opted-in
// pods' objects are, each once.
func TestOutsideTheOptInIsNeverDecoded(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartServer(t)
	c := newCluster(t) // "jobs" opted in, "plain" not
	c.namespace("team", podsOptIn)
	b := startBridge(t, ctx, c.client, srv.URL(), watch.Options{})

	// Each pod is created, then updated twice (its readiness flips).
	churn := func(ns string, n int, mutate ...func(*corev1.Pod)) {
		for i := range n {
			name := fmt.Sprintf("%s-%d", ns, i)
			c.createJob(ns, name, mutate...)
			c.update(ns, name, readiness)
			c.update(ns, name, readiness)
		}
	}
	churn("plain", 20)
	churn("team", 10) // not labelled: outside the opt-in
	churn("jobs", 5)
	for i := range 2 {
		name := fmt.Sprintf("team-in-%d", i)
		c.createJob("team", name, labelled("true"))
		c.update("team", name, readiness)
		c.update("team", name, readiness)
	}
	const inside = 7 // pods, each received 3 times
	testenv.Eventually(t, 5*time.Second, "every opted-in pod's add and updates", func() bool {
		return testutil.ToFloat64(b.m.WatchEvents.WithLabelValues("pod", "add")) == inside &&
			testutil.ToFloat64(b.m.WatchEvents.WithLabelValues("pod", "update")) == 2*inside
	})
	if got := decoded(b); got != 3*inside {
		t.Errorf("decoded %d pod objects, want %d: only the opted-in pods' (60 and 30 outside)", got, 3*inside)
	}
	if got := b.w.CachedPods(); got != inside {
		t.Errorf("the cache holds %d pods, want %d", got, inside)
	}
}

// TestATenantOutsideTheOptInCostsNothing: a tenant of a namespace that is
// not opted in labels its own pods as the webhook would
// (istio-aux.dev/watched=true), with a 200 KiB sidecars annotation. The
// cluster-wide watch brings them (a selector cannot read a namespace's
// labels), but they are not cached, counted or queued: the watcher, whose
// capacity is 3 pods, serves the opted-in namespace's 2. Once, they were
// cached and counted before their scope was read: five of them made the
// watcher refuse, and quits stopped everywhere.
func TestATenantOutsideTheOptInCostsNothing(t *testing.T) {
	big := strings.Repeat("vault-agent,", (200<<10)/12)
	forged := func(p *corev1.Pod) {
		p.Labels = map[string]string{keys.LabelWatched: "true", keys.LabelEnabled: "true"}
		p.Annotations[keys.AnnotationSidecars] = big
	}
	c, b, s := delivering(t, watch.Options{MaxPods: 3}, func(c *cluster) {
		for i := range 5 {
			c.createStray("plain", fmt.Sprintf("listed-%d", i), forged)
		}
	})
	for i := range 5 {
		name := fmt.Sprintf("watched-%d", i)
		c.createStray("plain", name, forged)
		c.update("plain", name, appExits(0))
	}
	var done []string
	for _, name := range []string{"a", "b"} {
		c.createJob("jobs", name)
		done = append(done, c.update("jobs", name, appExits(0)))
	}
	testenv.Eventually(t, 5*time.Second, "the opted-in pods' quits", func() bool {
		return s.count(done[0]) == 1 && s.count(done[1]) == 1
	})
	// Every pod object the API server sent was decoded: the 5 listed, the
	// tenant's 5 created and updated, the 2 opted-in created and updated.
	testenv.Eventually(t, 5*time.Second, "every pod object sent to be decoded", func() bool { return decoded(b) == 5+2*5+2*2 })
	select {
	case err := <-b.ran:
		t.Fatalf("the watcher stopped: %v", err)
	default:
	}
	if got := b.w.CachedPods(); got != 2 {
		t.Errorf("%d pods cached, want the opted-in namespace's 2", got)
	}
	added := testutil.ToFloat64(b.m.WatchEvents.WithLabelValues("pod", "add"))
	updated := testutil.ToFloat64(b.m.WatchEvents.WithLabelValues("pod", "update"))
	if added != 2 || updated != 2 {
		t.Errorf("%v pods added and %v updated for the workers, want 2 and 2: the tenant's are no work", added, updated)
	}
	if got := s.total(); got != 2 {
		t.Errorf("the function saw %v, want the 2 opted-in quits", s.seen)
	}
}

// TestScopeChangesBringAndDropLabelledPods: pods labelled
// istio-aux.dev/watched=true in a namespace out of scope (it was opted in
// when they were admitted, or a tenant labelled them) are dropped by the
// cluster-wide watch. When the namespace comes into scope they are listed
// at once and those that finished get their quits; when it leaves, they
// are dropped again (no quit for the one that finishes meanwhile), and
// back in scope that one gets its quit. A namespace whose pods opt in one
// by one admits only those labelled istio-aux.dev/enabled=true; opted in
// as a whole, it brings the others too. A pod whose namespace is created
// after it is found when the namespace is.
func TestScopeChangesBringAndDropLabelledPods(t *testing.T) {
	c, b, s := delivering(t, watch.Options{}, func(c *cluster) {
		c.createStray("plain", "before", watchedAs("true"))
	})
	beforeDone := c.update("plain", "before", appExits(0))
	c.createStray("plain", "late", watchedAs("true"))
	testenv.Eventually(t, 5*time.Second, "the pods' states to be decoded", func() bool { return decoded(b) == 3 })
	if got := b.w.CachedPods(); got != 0 {
		t.Fatalf("%d pods cached out of scope, want 0", got)
	}

	c.relabel("plain", optedIn)
	testenv.Eventually(t, 5*time.Second, "the quit of the pod that finished out of scope", func() bool { return s.count(beforeDone) == 1 })
	testenv.Eventually(t, 5*time.Second, "both pods cached", func() bool { return b.w.CachedPods() == 2 })

	c.relabel("plain", nil)
	testenv.Eventually(t, 5*time.Second, "both pods dropped", func() bool { return b.w.CachedPods() == 0 })
	lateDone := c.update("plain", "late", appExits(0))
	testenv.Eventually(t, 5*time.Second, "the finished pod's state to be decoded", func() bool { return decoded(b) == 6 })
	if s.count(lateDone) != 0 || b.w.CachedPods() != 0 {
		t.Fatalf("out of scope: %d pods cached, %v delivered", b.w.CachedPods(), s.seen)
	}
	c.relabel("plain", optedIn)
	testenv.Eventually(t, 5*time.Second, "the quit of the pod that finished while out of scope", func() bool { return s.count(lateDone) == 1 })

	// Pods opting in one by one: only the labelled one is admitted, until
	// the namespace opts in as a whole.
	c.namespace("team", podsOptIn)
	c.createStray("team", "in", labelled("true"), watchedAs("true"))
	c.createStray("team", "unlabelled", watchedAs("true"))
	unlabelledDone := c.update("team", "unlabelled", appExits(0))
	inDone := c.update("team", "in", appExits(0))
	// One watch brings both, in order: the labelled pod's quit is the sync
	// point.
	testenv.Eventually(t, 5*time.Second, "the labelled pod's quit", func() bool { return s.count(inDone) == 1 })
	if got := b.w.CachedPods(); got != 3 || s.count(unlabelledDone) != 0 {
		t.Fatalf("%d pods cached (want 3), %v delivered: a pod the scope does not admit", got, s.seen)
	}
	c.relabel("team", optedIn)
	testenv.Eventually(t, 5*time.Second, "the other pod's quit once the namespace opts in", func() bool { return s.count(unlabelledDone) == 1 })

	// A namespace created after its pod, which the watch brings first.
	c.createStray("new", "early", watchedAs("true"))
	earlyDone := c.update("new", "early", appExits(0))
	c.createJob("jobs", "sync")
	syncDone := c.update("jobs", "sync", appExits(0))
	testenv.Eventually(t, 5*time.Second, "a later pod's quit", func() bool { return s.count(syncDone) == 1 })
	if s.count(earlyDone) != 0 {
		t.Fatal("a pod of a namespace that does not exist got its quit")
	}
	c.namespace("new", optedIn)
	testenv.Eventually(t, 5*time.Second, "its quit once the namespace exists", func() bool { return s.count(earlyDone) == 1 })

	testenv.Eventually(t, 5*time.Second, "every pod cached once", func() bool { return b.w.CachedPods() == 6 })
	if got := s.total(); got != 6 {
		t.Errorf("the function saw %d events, want 6, each pod's quit once: %v", got, s.seen)
	}
}
