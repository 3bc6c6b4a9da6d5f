//go:build e2e

package ha

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/poll"
	"github.com/istio-aux/istio-aux/webhook"
)

// Targets.

func none(*testing.T, *env) string { return "" }

// leaderNode is the node of the bridge (or all-in-one) that holds the
// watcher's Lease.
func leaderNode(t *testing.T, e *env) string {
	return nodeOf(t, e.m.Cluster, leaseHolder(t, e.m.Cluster))
}

// streamLeaderNode is the node of the NATS server leading the stream.
func streamLeaderNode(t *testing.T, e *env) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := streamInfo(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	return nodeOf(t, e.m.Cluster, info.Cluster.Leader) // a server is named after its pod
}

// webhookNode is the node of the webhook replica the API server sends the
// admissions to now: it keeps one HTTP/2 connection to one replica and
// sends every review over it, so losing that replica's node is the fault
// that matters (losing the other's, nothing reaches it). That replica is
// the one whose count of admissions grows while the load creates pods.
func webhookNode(t *testing.T, e *env) string {
	t.Helper()
	pods, err := e.m.Cluster.Client().CoreV1().Pods(istioaux.SystemNamespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
	if err != nil {
		t.Fatal(err)
	}
	count := func() map[string]float64 {
		out := map[string]float64{}
		for _, p := range pods.Items {
			out[p.Spec.NodeName] = admissions(t, p.Status.PodIP)
		}
		return out
	}
	var busiest string
	err = poll.Until(context.Background(), time.Minute, func(context.Context) (bool, error) {
		before := count()
		<-time.After(2 * jobEvery) // a sampling period: the load creates a pod or two
		most := 0.0
		for node, n := range count() {
			if d := n - before[node]; d > most {
				busiest, most = node, d
			}
		}
		return most > 0, nil
	})
	if err != nil {
		t.Fatalf("no webhook replica admitted the load's pods: %v", err)
	}
	return busiest
}

// admissions is a webhook replica's count of admissions, read from its
// metrics.
func admissions(t *testing.T, ip string) float64 {
	return scrape(ip, webhook.MetricAdmissions+"{")
}

// Faults.

func powerOff(t *testing.T, e *env, node string) func() {
	t.Helper()
	n := e.m.Nodes.Node(node)
	if err := n.PowerOff(); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := n.PowerOn(context.Background()); err != nil {
			t.Fatalf("powering %s on: %v", node, err)
		}
	}
}

func partition(t *testing.T, e *env, node string) func() {
	t.Helper()
	n := e.m.Nodes.Node(node)
	if err := n.Partition(); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := n.Heal(); err != nil {
			t.Fatal(err)
		}
	}
}

func restart(what string) func(*testing.T, *env, string) func() {
	return func(t *testing.T, e *env, _ string) func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var err error
		if what == "etcd" {
			err = e.m.Cluster.RestartEtcd(ctx)
		} else {
			err = e.m.Cluster.RestartAPIServer(ctx)
		}
		if err != nil {
			t.Fatalf("restarting %s: %v", what, err)
		}
		return nil
	}
}

// upgrade applies istio-aux again with new images and waits for the
// rollout to end: the window then watches what follows it.
func upgrade(t *testing.T, e *env, _ string) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	next, err := shared.Upgrade(ctx, fmt.Sprintf("v%d", time.Now().Unix()))
	if err != nil {
		t.Fatalf("rolling to a new release: %v", err)
	}
	e.aux = next
	return nil
}

// placement says what the fault's node held when it began: istio-aux's and
// the cluster DNS's pods there (the bridge holding the watcher's Lease
// marked), and which NATS servers led the stream, the consumer and the
// bucket. A fault whose quits stop says in one line what it took.
func placement(e *env, node string) string {
	if node == "" {
		return "no node"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := e.m.Cluster.Client()
	holder := ""
	if l, err := cs.CoordinationV1().Leases(istioaux.SystemNamespace).Get(ctx, "istio-aux-watcher", metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	var there []string
	for _, ns := range []string{istioaux.SystemNamespace, "kube-system"} {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return fmt.Sprintf("%s: %v", node, err)
		}
		for _, p := range pods.Items {
			name := p.Name
			if name == holder {
				name += " (watching)"
			}
			there = append(there, name)
		}
	}
	held := node + " held " + strings.Join(there, ", ")
	if e.aux.Dir() != istioaux.Config {
		return held
	}
	js, done, err := jsOf(ctx, e)
	if err != nil {
		return held + "; NATS: " + err.Error()
	}
	defer done()
	groups, err := raftGroups(ctx, js)
	if err != nil {
		return held + "; NATS: " + err.Error()
	}
	var leaders []string
	for _, g := range groups {
		leader := ""
		if g.info != nil {
			leader = g.info.Leader
		}
		leaders = append(leaders, g.name+" led by "+leader)
	}
	return held + "; NATS: " + strings.Join(leaders, ", ")
}
