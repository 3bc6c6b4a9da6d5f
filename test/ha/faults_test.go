//go:build e2e

package ha

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/bridge/final"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// A fault the three-node cluster suffers while Jobs keep finishing.
type fault struct {
	name string
	// target is the node the fault hits, "" for none: the load keeps off
	// it from a little before the fault until the node is back.
	target func(t *testing.T, e *env) string
	// inject starts the fault and returns what ends it (powering the node
	// on, healing the partition), run once the window is over.
	inject func(t *testing.T, e *env, node string) (end func())
	// window is how long the fault is watched for: the Jobs whose apps end
	// within it are the ones measured.
	window time.Duration
	// p99Within, if set, bounds the measured Jobs' app exit → quit at the
	// 99th percentile (the Knative path's promise: seconds).
	p99Within time.Duration
	// long marks a fault whose window alone takes minutes: `go test -short`
	// (make e2e, which CI runs within its budget) leaves it out; make
	// e2e-ha runs it.
	long bool
}

// env is what the faults act on.
type env struct {
	m   *mesh.Mesh
	aux *istioaux.Installed
}

// Loads and limits of the fault runs.
const (
	jobEvery  = 3 * time.Second
	jobRunFor = "3s"
	// maxInFlight bounds the Jobs under way (load): twice what the steady
	// rate keeps in flight on this machine (a Job takes 15 to 20 s from
	// its creation to its proxy's quit: 5 to 7 at once).
	maxInFlight = 14
	// resumeWithin is the bound on quits stopping after any one
	// fault.
	resumeWithin = 30 * time.Second
)

// TestHAFaults: config/ on three nodes, while one-pod Jobs keep finishing
// on the nodes the fault spares, survives each fault in turn: the node of
// the bridge that watches powered off; the node of the NATS stream's
// leader powered off; a node of a webhook replica powered off; the
// watching bridge's node partitioned for 60 s and healed, then for 7
// minutes, past the eviction of its pods (not under -short); kube-apiserver
// and etcd killed and started again; istio-aux rolled to a new release.
// After each: every Job completes, every proxy is quit exactly once (no
// quit lost, none repeated), none before its app ended, every pod created
// was held for its proxy, and quits resumed within 30 s of the fault.
func TestHAFaults(t *testing.T) {
	runFaults(t, "config", []fault{
		powerOffWatcher,
		{name: "power-off-nats-stream-leader-node", target: streamLeaderNode, inject: powerOff, window: 60 * time.Second},
		{name: "power-off-webhook-node", target: webhookNode, inject: powerOff, window: 90 * time.Second},
		{name: "partition-watching-bridge-node-60s", target: leaderNode, inject: partition, window: 60 * time.Second},
		// Past the eviction: the node's pods are marked for deletion
		// after the 300 s NoExecute tolerations (50 s after the node
		// went unreachable), replaced elsewhere, and killed by their
		// kubelet only once the node is back.
		{name: "partition-watching-bridge-node-past-eviction", target: leaderNode, inject: partition, window: 7 * time.Minute, long: true},
		{name: "restart-kube-apiserver", target: none, inject: restart("kube-apiserver"), window: 30 * time.Second},
		{name: "restart-etcd", target: none, inject: restart("etcd"), window: 30 * time.Second},
		{name: "rolling-upgrade", target: none, inject: upgrade, window: 30 * time.Second},
	})
}

// powerOffWatcher powers off the node of the bridge that watches.
var powerOffWatcher = fault{name: "power-off-watching-bridge-node", target: leaderNode, inject: powerOff, window: 60 * time.Second}

// TestV133MixedNodeLoss: a cluster in the middle of an upgrade
// (mesh.V133Mixed: control plane and one node at Kubernetes 1.33, two
// nodes at 1.32), whose istiod (auto) therefore gives every pod a classic
// sidecar, runs config/ while Jobs finish on every node, and loses the node
// of the watching bridge: as on the newest, quits resume within 30 s, none
// is lost or repeated, none comes early, every pod was held.
func TestV133MixedNodeLoss(t *testing.T) {
	shared.Use(t, mesh.V133Mixed)
	t.Logf("cluster: %s", mesh.ShapeOf(mesh.V133Mixed))
	runFaults(t, "mixed 1.33/1.32", []fault{powerOffWatcher})
}

// TestV133MixedIstio127NodeLoss is TestV133MixedNodeLoss with Istio 1.27
// (OpenShift Service Mesh 3.2's), the first release whose default is auto:
// one kubelet older than 1.33 keeps every sidecar classic, and istio-aux
// serves them all.
func TestV133MixedIstio127NodeLoss(t *testing.T) {
	shared.Use(t, mesh.V133MixedIstio127)
	t.Logf("cluster: %s", mesh.ShapeOf(mesh.V133MixedIstio127))
	runFaults(t, "mixed 1.33/1.32, Istio 1.27", []fault{powerOffWatcher})
}

// runFaults runs faults one after another on config/ under a load of
// Jobs, checks each, and reports them as one table named name.
func runFaults(t *testing.T, name string, faults []fault) {
	m, aux := installedAs(t, istioaux.Config)
	e := &env{m: m, aux: aux}
	l := startLoad(t, m.Cluster, jobEvery, jobRunFor, maxInFlight)
	var rows []result
	for _, f := range faults {
		ran, settled := false, false
		t.Run(f.name, func(t *testing.T) {
			if f.long && testing.Short() {
				t.Skipf("a %v window: left out by -short (make e2e); make e2e-ha runs it", f.window)
			}
			ran = true
			r := runFault(t, e, l, f)
			settled = true
			rows = append(rows, r)
			r.check(t)
			if f.p99Within > 0 && r.p99 > f.p99Within {
				t.Errorf("%s: app exit → quit p99 %v, want within %v", f.name, r.p99, f.p99Within)
			}
		})
		if ran && !settled {
			break // the next fault would start on a cluster not yet whole
		}
	}
	report(t, name, rows)
}

// runFault runs one fault under the load and checks what it left.
func runFault(t *testing.T, e *env, l *load, f fault) result {
	node := f.target(t, e)
	l.keepOff(t, node)
	refusedBefore, heldBefore := l.refusals(t), l.held()
	held := placement(e, node)
	start := time.Now()
	end := f.inject(t, e, node)
	t.Logf("%s: fault began at %s on %q; %s", f.name, start.Format(time.StampMilli), node, held)
	// The fault lasts its window: a schedule, not a wait for anything.
	<-time.After(time.Until(start.Add(f.window)))
	if end != nil {
		end()
	}
	whole(t, e)
	l.keepOff(t, "")
	settled, err := l.settle(4 * time.Minute)
	if err != nil {
		// What the load saw, and what istio-aux's containers said: the
		// cluster and its logs are gone once the test ends.
		timeline(t, l.snapshot(), l.quitEvents(t), start)
		logIstioAux(t, e.m.Cluster, start)
		t.Fatalf("%v; when the fault began, %s", err, held)
	}
	pods := slices.DeleteFunc(l.snapshot(), func(p tracked) bool { return !settled[p.job] })
	events := l.quitEvents(t)
	r := measure(f.name, pods, events, start, f.window)
	r.refused = l.refusals(t) - refusedBefore
	t.Log(r.String())
	for _, pod := range r.silentPods {
		t.Logf("%s: no ProxyQuit Event; its Events: %s", pod, l.eventsOf(t, pod))
	}
	if held := l.held() - heldBefore; held > 0 {
		t.Logf("%s: %d ticks of the load created no Job, %d Jobs in flight", f.name, held, maxInFlight)
	}
	// A silent pod's quit went without its record: what the function
	// logged (of its pods still there) says which way.
	if !r.ok() || r.p99 > resumeWithin || len(r.silentPods) > 0 {
		timeline(t, pods, events, start)
		logIstioAux(t, e.m.Cluster, start)
		// Last, where CI's tail (hack/failures) keeps it.
		t.Logf("%s: when the fault began, %s", f.name, held)
	}
	return r
}

// timeline logs, for each pod of the load around the fault, when it was
// created and its app and proxy were seen done, relative to the fault.
func timeline(t *testing.T, pods []tracked, events map[string]int32, start time.Time) {
	t.Helper()
	rel := func(at time.Time) string {
		if at.IsZero() {
			return "      -"
		}
		return fmt.Sprintf("%+7.1fs", at.Sub(start).Seconds())
	}
	var b strings.Builder
	for _, p := range pods {
		if p.created.Before(start.Add(-30*time.Second)) && !p.quit.IsZero() && p.quit.Before(start) {
			continue
		}
		fmt.Fprintf(&b, "%-10s on %-7s created %s app done %s quit %s held %-5t early %-5t ProxyQuit %d\n",
			p.name, p.node, rel(p.created), rel(p.appExit), rel(p.quit), p.held, p.early, events[p.name])
	}
	t.Logf("the load's pods around the fault:\n%s", b.String())
}

// logIstioAux logs what istio-aux's containers wrote since a little before
// since: what explains a quit that came late or not at all.
func logIstioAux(t *testing.T, c *cluster.Cluster, since time.Time) {
	t.Helper()
	ctx := context.Background()
	pods, err := c.Client().CoreV1().Pods(istioaux.SystemNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("istio-aux's pods: %v", err)
		return
	}
	from := metav1.NewTime(since.Add(-10 * time.Second))
	for _, p := range pods.Items {
		for _, ctr := range p.Spec.Containers {
			out, err := c.Client().CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name, SinceTime: &from}).DoRaw(ctx)
			t.Logf("logs of %s/%s on %s (%v):\n%s", p.Name, ctr.Name, p.Spec.NodeName, err, cluster.LastLines(string(out), 60))
		}
	}
}

// whole waits until the cluster is whole again: every node Ready, every
// workload of istio-aux Available, and the NATS stream, consumer and bucket
// each with a leader and every copy current.
func whole(t *testing.T, e *env) {
	t.Helper()
	bg := context.Background()
	for _, n := range e.m.Nodes.Names() {
		if err := poll.Until(bg, 4*time.Minute, func(ctx context.Context) (bool, error) {
			return e.m.Cluster.NodeReady(ctx, n) == nil, nil
		}); err != nil {
			t.Fatalf("node %s not Ready again: %v", n, err)
		}
	}
	ctx, cancel := context.WithTimeout(bg, 5*time.Minute)
	defer cancel()
	if err := e.aux.WaitAvailable(ctx, 5*time.Minute); err != nil {
		logIstioAux(t, e.m.Cluster, time.Now().Add(-5*time.Minute))
		t.Fatal(err)
	}
	if e.aux.Dir() != istioaux.Config {
		return
	}
	var why error
	err := poll.Until(bg, 3*time.Minute, func(context.Context) (bool, error) {
		why = natsWhole(e)
		return why == nil, nil
	})
	if err != nil {
		err = fmt.Errorf("%w: %w", err, why)
	}
	if err != nil {
		logIstioAux(t, e.m.Cluster, time.Now().Add(-3*time.Minute))
		t.Fatalf("NATS is not whole again: %v", err)
	}
}

// natsWhole says why NATS is not whole: the stream, the dispatchers'
// consumer or the bucket of final failures without a leader, or with a
// copy offline or behind. The next fault may take any leader's server: one
// of them left with a single current copy would stop with it.
func natsWhole(e *env) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, done, err := jsOf(ctx, e)
	if err != nil {
		return err
	}
	defer done()
	groups, err := raftGroups(ctx, js)
	if err != nil {
		return err
	}
	for _, g := range groups {
		c := g.info
		if c == nil || c.Leader == "" || len(c.Replicas) != 2 {
			return fmt.Errorf("%s: cluster %+v", g.name, c)
		}
		for _, r := range c.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("%s: copy %s behind (leader %s, copy %+v)", g.name, r.Name, c.Leader, *r)
			}
		}
	}
	return nil
}

// raftGroup is one of the replicated things NATS keeps for istio-aux.
type raftGroup struct {
	name string
	info *jetstream.ClusterInfo
}

// raftGroups reads the cluster info of the stream, the consumer and the
// bucket's stream (each lookup asks the servers afresh).
func raftGroups(ctx context.Context, js jetstream.JetStream) ([]raftGroup, error) {
	s, err := js.Stream(ctx, transport.DefaultName)
	if err != nil {
		return nil, err
	}
	cons, err := s.Consumer(ctx, transport.Durable)
	if err != nil {
		return nil, err
	}
	kv, err := js.Stream(ctx, "KV_"+final.Bucket)
	if err != nil {
		return nil, err
	}
	return []raftGroup{
		{"stream", s.CachedInfo().Cluster},
		{"consumer", cons.CachedInfo().Cluster},
		{"bucket", kv.CachedInfo().Cluster},
	}, nil
}

// streamInfo asks NATS, as the bridge does (with the Secret's token, any
// server), about the stream.
func streamInfo(ctx context.Context, e *env) (*jetstream.StreamInfo, error) {
	js, done, err := jsOf(ctx, e)
	if err != nil {
		return nil, err
	}
	defer done()
	s, err := js.Stream(ctx, transport.DefaultName)
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil // the lookup just fetched it
}

// jsOf connects to NATS as the bridge does (with the Secret's token, any
// ready server) and returns its JetStream and what closes the connection.
func jsOf(ctx context.Context, e *env) (jetstream.JetStream, func(), error) {
	cs := e.m.Cluster.Client()
	secret, err := cs.CoreV1().Secrets(istioaux.SystemNamespace).Get(ctx, "istio-aux-nats", metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	pods, err := cs.CoreV1().Pods(istioaux.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=nats"})
	if err != nil {
		return nil, nil, err
	}
	var urls []string
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && cluster.PodReady(&p) {
			urls = append(urls, "nats://"+p.Status.PodIP+":4222")
		}
	}
	if len(urls) == 0 {
		return nil, nil, fmt.Errorf("no NATS server is ready")
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Token(string(secret.Data["token"])), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// TestHAStandalone: config/standalone on three nodes (two all-in-ones on a
// Lease, each with its own embedded JetStream), while Jobs keep finishing,
// survives the power-off of the node of the all-in-one that watches: the
// other's first list finds every pod that finished meanwhile.
func TestHAStandalone(t *testing.T) {
	m, aux := installedAs(t, istioaux.Standalone)
	e := &env{m: m, aux: aux}
	spread(t, m.Cluster, "app.kubernetes.io/component=allinone", 2)
	l := startLoad(t, m.Cluster, jobEvery, jobRunFor, maxInFlight)
	var rows []result
	f := fault{name: "power-off-watching-allinone-node", target: leaderNode, inject: powerOff, window: 60 * time.Second}
	t.Run(f.name, func(t *testing.T) {
		r := runFault(t, e, l, f)
		rows = append(rows, r)
		r.check(t)
	})
	report(t, "standalone", rows)
}
