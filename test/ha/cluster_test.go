//go:build e2e

package ha

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/httpget"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// TestHarnessThreeNodes: the harness's cluster is three nodes a pod can
// be on, whose pods reach each other and Services across nodes, as the
// control plane reaches them; and each fault does what it says: a
// partitioned node is unreachable until healed, a node powered off loses
// its processes and comes back with its pods, the API server and etcd come
// back from SIGKILL.
func TestHarnessThreeNodes(t *testing.T) {
	m := threeNodes(t)
	c := m.Cluster
	ctx := context.Background()
	ns := mesh.Namespace(t, c, "", false, nil)
	names := m.Nodes.Names()
	if len(names) != nodes {
		t.Fatalf("nodes %v, want %d", names, nodes)
	}
	for _, n := range names {
		if err := c.NodeReady(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	spreadDNS(t, c)

	// A web server on each node, one Service over them; from a pod on the
	// first node: the others' pods, the Service by its name (cluster DNS,
	// kube-proxy), the API server through its Service.
	ips := mesh.Web(t, c, ns, names...)
	targets := []string{"http://web/", "kubernetes.default.svc:443"}
	for _, n := range names[1:] {
		targets = append(targets, "http://"+ips[n]+":8080/")
	}
	mesh.Probe(t, c, ns, names[0], targets...)

	// From the control plane's machine, each pod directly.
	for _, n := range names {
		reachable(t, ips[n], true)
	}

	t.Run("partition", func(t *testing.T) {
		node := m.Nodes.Node(names[2])
		if err := node.Partition(); err != nil {
			t.Fatal(err)
		}
		reachable(t, ips[names[2]], false)
		reachable(t, ips[names[1]], true)
		if err := node.Heal(); err != nil {
			t.Fatal(err)
		}
		reachable(t, ips[names[2]], true)
	})

	t.Run("power-off", func(t *testing.T) {
		name := names[1]
		node := m.Nodes.Node(name)
		kubelet := c.Pids()[name+"/kubelet"]
		if err := node.PowerOff(); err != nil {
			t.Fatal(err)
		}
		if alive(kubelet) {
			t.Errorf("%s's kubelet (pid %d) outlived its power-off", name, kubelet)
		}
		reachable(t, ips[name], false)
		if err := node.PowerOn(ctx); err != nil {
			t.Fatal(err)
		}
		// The kubelet finds its pod in the API server and runs it again, in
		// a new sandbox.
		p := mesh.WaitPod(t, c, ns, "web-"+name, 3*time.Minute, func(p *corev1.Pod) bool {
			return cluster.PodReady(p) && p.Status.PodIP != ""
		})
		reachable(t, p.Status.PodIP, true)
	})

	t.Run("control-plane-restarts", func(t *testing.T) {
		for what, restart := range map[string]func(context.Context) error{
			"kube-apiserver": c.RestartAPIServer,
			"etcd":           c.RestartEtcd,
		} {
			if err := restart(ctx); err != nil {
				t.Fatalf("restarting %s: %v", what, err)
			}
			// The cluster works: a pod is scheduled, run and reports back.
			name := "after-" + what
			p := mesh.Pod(ns, name, names[0], corev1.RestartPolicyNever, corev1.Container{
				Name: "app", Image: images.AppRef, Args: []string{"exit", "0"}})
			if err := poll.Until(ctx, time.Minute, func(ctx context.Context) (bool, error) {
				_, err := c.Client().CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
				return err == nil, err
			}); err != nil {
				t.Fatalf("after restarting %s: %v", what, err)
			}
			mesh.WaitPod(t, c, ns, name, 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		}
	})
}

// TestHAShape: config/ on three nodes is the shape docs/design.md names:
// two bridges, two webhook replicas and two function pods on two nodes
// each, three NATS servers on three, and exactly one bridge holding the
// Lease.
func TestHAShape(t *testing.T) {
	m, _ := installedAs(t, istioaux.Config)
	c := m.Cluster
	for component, want := range map[string]int{"bridge": 2, "webhook": 2, "nats": 3} {
		spread(t, c, "app.kubernetes.io/component="+component, want)
	}
	spread(t, c, "serving.knative.dev/service=proxy-quit", 2)
	// A bridge takes the Lease (from an all-in-one of a shape installed
	// before, once it expires).
	err := poll.Until(context.Background(), time.Minute, func(context.Context) (bool, error) {
		leader := leaseHolder(t, c)
		return strings.HasPrefix(leader, "istio-aux-bridge-"), fmt.Errorf("the Lease is held by %q", leader)
	})
	if err != nil {
		t.Errorf("want a bridge pod holding the watcher's Lease: %v", err)
	}
}

// spreadDNS checks that the cluster DNS runs on two nodes, as kubeadm
// places it: one node's loss leaves a replica.
func spreadDNS(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	pods, err := c.Client().CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]bool{}
	for _, p := range pods.Items {
		on[p.Spec.NodeName] = true
	}
	if len(pods.Items) != 2 || len(on) != 2 {
		t.Errorf("CoreDNS: %d pods on nodes %v, want 2 on 2", len(pods.Items), on)
	}
}

// reachable checks from the control plane's machine that the web server at
// ip answers (want) or stays silent for a whole second at a time (!want),
// within a minute.
func reachable(t *testing.T, ip string, want bool) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	err := poll.Until(context.Background(), time.Minute, func(ctx context.Context) (bool, error) {
		err := httpget.OK(ctx, client, "http://"+ip+":8080/")
		return (err == nil) == want, err
	})
	if err != nil {
		t.Fatalf("%s reachable = %t for a minute, want %t: %v", ip, !want, want, err)
	}
}

func alive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return pid > 0 && err == nil
}

// machineCPU is the CPU seconds the machine has spent busy (all but idle
// and iowait), from /proc/stat.
func machineCPU(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	var busy float64
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy / 100 // USER_HZ
}
