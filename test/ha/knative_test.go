//go:build e2e

package ha

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/istio-aux/istio-aux/kubectl/check"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/knative"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// The function as config/ ships it, a Knative Service on Knative Serving,
// on the three nodes (issue 43): its pods' and Knative's own nodes lost.

const function = "proxy-quit"

// TestHAKnativeNodeLoss: config/ with Knative Serving at its defaults on
// three nodes, the function spread as docs/install.md says, while Jobs keep
// finishing on the nodes each fault spares: the node of a pod of the
// function powered off (app exit → quit within 30 s at the 99th percentile
// too: the dispatcher skips the dead pod in seconds), then the node of
// Knative's activator. After each, the checks of every TestHAFaults fault.
func TestHAKnativeNodeLoss(t *testing.T) {
	m := shared.Use(t, mesh.HAKnative)
	t.Logf("cluster: %s", mesh.ShapeOf(mesh.HAKnative))
	installedAs(t, istioaux.Config)
	spreadFunction(t, m.Cluster)
	item := nodeLossItem(t, m.Cluster)
	t.Logf("check's %s: %s %s", item.Name, item.Status, item.Message)
	if item.Status != check.StatusOK {
		t.Errorf("check's %s is %s on the install docs/install.md describes: %s", item.Name, item.Status, item.Message)
	}
	// Knative's cost, logged (docs/faults.md): what the idle cluster
	// keeps busy with it installed.
	cpu := machineCPU(t)
	start := time.Now()
	<-time.After(20 * time.Second) // a sampling period, not a wait for anything
	t.Logf("three nodes, istio-aux and Knative Serving at rest: %.2f of the machine's cores busy", (machineCPU(t)-cpu)/time.Since(start).Seconds())
	sinkBefore := deliveries(t, m.Cluster, "sink")
	runFaults(t, "Knative Serving "+knative.Newest.String(), []fault{
		{name: "power-off-function-pod-node", target: functionNode, inject: powerOff, window: 60 * time.Second, p99Within: resumeWithin},
		// Not bound at p99 beyond TestHAFaults' checks: Knative's
		// components share one node, often with the watching bridge or
		// the stream leader, whose faults TestHAFaults bounds.
		{name: "power-off-knative-activator-node", target: activatorNode, inject: powerOff, window: 60 * time.Second},
	})
	// Logged, not asserted: a counter restarts with its pod.
	t.Logf("deliveries through K_SINK during the faults: %v (before: %v); direct to the function's pods: %v",
		deliveries(t, m.Cluster, "sink"), sinkBefore, deliveries(t, m.Cluster, "direct"))
}

// spreadFunction runs docs/install.md's lines that spread the function's
// pods over two nodes, and waits for its new revision: Ready, with two
// ready pods on two nodes.
func spreadFunction(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lines := installLines(t)
	for _, args := range lines {
		if err := c.Kubectl(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := knative.WaitReady(ctx, c, istioaux.SystemNamespace, function, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	nodes := functionOnTwoNodes(t, c)
	t.Logf("the function spread by docs/install.md's %d lines: ready on %v", len(lines), nodes)
}

// installLines are the kubectl lines of docs/install.md's block that the
// marker names, as arguments (the shell's single quotes removed).
func installLines(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, found := strings.Cut(string(b), "<!-- test/ha's TestHAKnativeNodeLoss runs the kubectl lines of this block as they are. -->\n```sh\n")
	block, _, closed := strings.Cut(block, "```")
	if !found || !closed {
		t.Fatal("docs/install.md has no block for TestHAKnativeNodeLoss")
	}
	var out [][]string
	for _, line := range strings.Split(block, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "kubectl "); ok {
			out = append(out, shellWords(rest))
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/install.md's block for TestHAKnativeNodeLoss has no kubectl line")
	}
	return out
}

// shellWords splits a line as the shell does words and single quotes.
func shellWords(line string) []string {
	var out []string
	var w strings.Builder
	quoted, in := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				out = append(out, w.String())
				w.Reset()
			}
			in = false
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, w.String())
	}
	return out
}

// functionNodes are the nodes of the function's ready pods.
func functionNodes(ctx context.Context, c *cluster.Cluster) ([]string, error) {
	pods, err := c.Client().CoreV1().Pods(istioaux.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: knative.PodSelector(function)})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && cluster.PodReady(&p) {
			seen[p.Spec.NodeName] = true
		}
	}
	return sortedNames(seen), nil
}

// functionOnTwoNodes waits until the function has ready pods on two nodes
// or more, and returns those nodes.
func functionOnTwoNodes(t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	var nodes []string
	err := poll.Until(context.Background(), 3*time.Minute, func(ctx context.Context) (bool, error) {
		var err error
		nodes, err = functionNodes(ctx, c)
		return err == nil && len(nodes) >= 2, nil
	})
	if err != nil {
		t.Fatalf("the function's pods are not ready on two nodes: %v (ready on %v; %s)", err, nodes,
			c.PodsSummary(context.Background(), istioaux.SystemNamespace, knative.PodSelector(function)))
	}
	return nodes
}

// nodeLossItem is what kubectl istio-aux check says of the function's
// Knative Service and a node's loss.
func nodeLossItem(t *testing.T, c *cluster.Cluster) check.Item {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := check.Checker{Client: c.Client(), Dynamic: dyn, SystemNamespace: istioaux.SystemNamespace}.Run(context.Background())
	for _, it := range r.Items {
		if it.Name == check.ItemFunctionNodeLoss {
			return it
		}
	}
	t.Fatalf("check has no %s item: %+v", check.ItemFunctionNodeLoss, r.Items)
	return check.Item{}
}

// functionNode is the node of one of the function's two ready pods, once
// it has two on two nodes again (after the last fault).
func functionNode(t *testing.T, e *env) string {
	t.Helper()
	nodes := functionOnTwoNodes(t, e.m.Cluster)
	// Not the watching bridge's node where there is a choice: that fault
	// is TestHAFaults'; this one is the function's alone.
	leader := leaderNode(t, e)
	for _, n := range nodes {
		if n != leader {
			return n
		}
	}
	return nodes[0]
}

// activatorNode is the node of Knative's activator (one replica, as its
// release ships it), once it is ready.
func activatorNode(t *testing.T, e *env) string {
	t.Helper()
	var node string
	err := poll.Until(context.Background(), 3*time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := e.m.Cluster.Client().CoreV1().Pods("knative-serving").List(ctx, metav1.ListOptions{LabelSelector: "app=activator"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && cluster.PodReady(&p) {
				node = p.Spec.NodeName
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no ready activator: %v", err)
	}
	var also []string
	pods, _ := e.m.Cluster.Client().CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	for _, p := range pods.Items {
		if p.Namespace == "knative-serving" || p.Namespace == istioaux.SystemNamespace {
			also = append(also, p.Namespace+"/"+p.Name)
		}
	}
	t.Logf("the activator's node %s also runs %v (the watcher's node: %s)", node, also, leaderNode(t, e))
	return node
}

// deliveries sums istio_aux_dispatch_path_total{path} over the bridges
// that answer.
func deliveries(t *testing.T, c *cluster.Cluster, path string) float64 {
	t.Helper()
	pods, err := c.Client().CoreV1().Pods(istioaux.SystemNamespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=bridge"})
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			sum += scrape(p.Status.PodIP, fmt.Sprintf(`istio_aux_dispatch_path_total{path=%q}`, path))
		}
	}
	return sum
}

// scrape sums the samples of a pod's metrics whose series starts with
// prefix (0 when it does not answer).
func scrape(ip, prefix string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ip+":9090/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}
