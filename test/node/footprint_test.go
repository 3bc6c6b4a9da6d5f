//go:build e2e

package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
	"github.com/istio-aux/istio-aux/test/realnode"
)

// TestNodeFootprint measures what pods cost the real node: create ->
// Running per pod, and the CPU time and memory of the node's side (kubelet,
// containerd, one shim per pod, the pods' cgroups) per pod. It runs only
// with NODE_MEASURE=<pods>, alone (not in parallel with the other tests).
func TestNodeFootprint(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("NODE_MEASURE"))
	if n <= 0 {
		t.Skip("set NODE_MEASURE=<number of pods> to measure the real node's footprint")
	}
	c := nodeCluster(t)
	ns := mesh.Namespace(t, c, "", false, nil)
	before := sample(t, c)
	created := map[string]time.Time{}
	start := time.Now()
	for i := range n {
		name := fmt.Sprintf("p%03d", i)
		created[name] = time.Now()
		mesh.CreatePod(t, c, mesh.Pod(ns, name, "", corev1.RestartPolicyNever,
			appContainer(map[string]string{"APP_NEEDS_NETWORK": "false", "APP_RUN_FOR": "1h"})))
	}
	running := map[string]time.Duration{}
	err := poll.Until(context.Background(), 5*time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if _, seen := running[p.Name]; !seen && p.Status.Phase == corev1.PodRunning {
				running[p.Name] = time.Since(created[p.Name])
			}
		}
		return len(running) == n, nil
	})
	if err != nil {
		t.Fatalf("%d of %d pods Running: %v", len(running), n, err)
	}
	all := time.Since(start)
	up := sample(t, c)
	// Steady state: what running pods cost while nothing happens.
	time.Sleep(10 * time.Second) // the measuring window, not a synchronisation
	idle := sample(t, c)

	var lat []time.Duration
	for _, d := range running {
		lat = append(lat, d)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	mib := func(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
	per := func(v float64) float64 { return v / float64(n) }
	t.Logf("%d pods: all Running %s after the first create; create->Running p50 %s, max %s",
		n, all.Round(time.Millisecond), lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	t.Logf("node CPU to start them: %.2f CPU-s per pod (kubelet %.2f, containerd %.2f, shims+runc %.2f, pods %.2f)",
		per(up.cpu()-before.cpu()), per(up.kubeletCPU-before.kubeletCPU), per(up.containerdCPU-before.containerdCPU),
		per(up.shimCPU-before.shimCPU), per(up.podCPU-before.podCPU))
	t.Logf("node CPU while %d pods idle: %.1f%% of a core (kubelet %.1f%%, containerd %.1f%%, shims %.1f%%)",
		n, 10*(idle.cpu()-up.cpu()), 10*(idle.kubeletCPU-up.kubeletCPU), 10*(idle.containerdCPU-up.containerdCPU), 10*(idle.shimCPU-up.shimCPU))
	t.Logf("memory per pod: %s (shim RSS %s, pod cgroup RSS %s, kubelet +%s, containerd +%s); idle kubelet %s, containerd %s before the pods",
		mib(per(idle.mem()-before.mem())), mib(per(idle.shimRSS-before.shimRSS)), mib(per(idle.podRSS-before.podRSS)),
		mib(per(idle.kubeletRSS-before.kubeletRSS)), mib(per(idle.containerdRSS-before.containerdRSS)),
		mib(before.kubeletRSS), mib(before.containerdRSS))
}

// usage is one sample of the node's CPU seconds (with reaped children)
// and resident bytes.
type usage struct {
	kubeletCPU, containerdCPU, shimCPU, podCPU float64
	kubeletRSS, containerdRSS, shimRSS, podRSS float64
}

func (u usage) cpu() float64 { return u.kubeletCPU + u.containerdCPU + u.shimCPU + u.podCPU }
func (u usage) mem() float64 { return u.kubeletRSS + u.containerdRSS + u.shimRSS + u.podRSS }

func sample(t *testing.T, c *cluster.Cluster) usage {
	t.Helper()
	var u usage
	pids := c.Pids()
	u.kubeletCPU, u.kubeletRSS = procUsage(pids["kubelet"])
	u.containerdCPU, u.containerdRSS = procUsage(pids["containerd"])
	system := filepath.Join("/sys/fs/cgroup/memory", realnode.NodeCgroup("node-0"), "system", "cgroup.procs")
	b, err := os.ReadFile(system)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(exe) == "containerd-shim-runc-v2" {
			cpu, rss := procUsage(pid)
			u.shimCPU += cpu
			u.shimRSS += rss
		}
	}
	pods := filepath.Join(realnode.NodeCgroup("node-0"), "kubepods")
	ns, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", pods, "cpuacct.usage"))
	nsec, _ := strconv.ParseFloat(strings.TrimSpace(string(ns)), 64)
	u.podCPU = nsec / 1e9
	stat, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", pods, "memory.stat"))
	for line := range strings.Lines(string(stat)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_rss "); ok {
			u.podRSS, _ = strconv.ParseFloat(v, 64)
		}
	}
	return u
}

// procUsage is a process's CPU seconds (its own and its reaped children's)
// and resident bytes.
func procUsage(pid int) (cpu, rss float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	// Fields after the command: utime, stime, cutime, cstime are 12-15;
	// rss (pages) is 22.
	for _, i := range []int{11, 12, 13, 14} {
		v, _ := strconv.ParseFloat(f[i], 64)
		cpu += v / 100 // USER_HZ
	}
	pages, _ := strconv.ParseFloat(f[21], 64)
	return cpu, pages * float64(os.Getpagesize())
}
