// Package realnode is the test harness's real node (New), which makes
// test/cluster's control plane a whole single-node cluster, as kubeadm
// would give one: containerd, runc and the kubelet (RealNodeName, at
// NodeIP), kube-proxy, an image registry every image is pulled from
// (PushImage, KoResolve) and CoreDNS (whole.go), in a network namespace of
// the test binary's own (RunInNetns, netns.go), whose crashed runs the next
// one sweeps (Cleanup, nodeclean.go). Tests that need it call RequireNode;
// programs ask NodeUnavailable.
package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// Node is the real node, RealNodeName, a cluster.Node: the registry,
// containerd, the kubelet and kube-proxy run as the cluster's processes
// (logs prefixed "registry|", "containerd|", "kubelet|", "kube-proxy|"),
// all of their files are under the cluster dir, and the pods under the
// run's cgroup. One serves one cluster.
type Node struct {
	c     *cluster.Cluster // set by Start once the node may run here
	dir   string           // the cluster's work dir
	procs []proc
	// cgroup is the kubelet's cgroupRoot (the run's cgroup): the pods go to
	// cgroup/kubepods, containerd and its shims sit in cgroup/harness.
	cgroup string
	socket string // containerd's
	ctr    string // the ctr binary
}

// proc is one of the node's processes, named as in the log.
type proc struct {
	name string
	*cluster.Process
}

// New returns a real node for cluster.Options.Node: with containerd and
// the kubelet, kube-proxy, a registry every image is pulled from
// (PushImage), and CoreDNS. The process must run inside RunInNetns; tests
// call RequireNode first.
func New() *Node { return &Node{} }

var _ cluster.Node = (*Node)(nil)

// WorkDirBase is the run's state directory, which the parent removes even
// if this process dies.
func (n *Node) WorkDirBase() string {
	if insideNetns == "" {
		return ""
	}
	return stateDirOf(insideNetns)
}

// IP is NodeIP.
func (n *Node) IP() string { return NodeIP }

// Start makes the control plane a whole single-node cluster: the
// registry, containerd and the kubelet, kube-proxy, persistent volumes,
// then the cluster DNS as a pod (the scheduler places it, the node pulls its
// image). Every step waits until the part it started works.
func (n *Node) Start(ctx context.Context, c *cluster.Cluster) error {
	if insideNetns == "" {
		return fmt.Errorf("a real node runs only inside RunInNetns's network namespace (%s)", nodeUnavailable)
	}
	if err := nodeAlone(); err != nil {
		return err
	}
	n.c, n.dir, n.cgroup = c, c.Dir(), nodeCgroup
	var took []string
	for _, step := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"registry", n.startRegistry},
		{"containerd", n.startContainerd},
		{"kubelet Ready", n.startKubelet},
		{"kube-proxy", n.startKubeProxy},
		{"volumes", n.startVolumes},
		{"cluster DNS", n.startClusterDNS},
	} {
		start := time.Now()
		if err := step.run(ctx); err != nil {
			return fmt.Errorf("real node, %s: %w", step.name, err)
		}
		took = append(took, fmt.Sprintf("%s %s", step.name, time.Since(start).Round(time.Millisecond)))
	}
	fmt.Fprintf(c.Log(), "harness| real node up: %s\n", strings.Join(took, ", "))
	return nil
}

func (n *Node) path(name string) string { return filepath.Join(n.dir, name) }

// start starts one of the node's processes.
func (n *Node) start(name, path string, args ...string) (*cluster.Process, error) {
	p, err := n.c.StartProcess(name, nil, path, args...)
	if err != nil {
		return nil, err
	}
	n.procs = append(n.procs, proc{name, p})
	return p, nil
}

// NodeCgroup is the real node's cgroup root, the same path below every
// cgroup hierarchy's mount point: the pods are in NodeCgroup()/kubepods,
// containerd, its shims and the harness in NodeCgroup()/harness. It is ""
// outside RunInNetns's namespace.
func NodeCgroup() string { return nodeCgroup }

// nodeAlone fails when another real node already runs in this namespace:
// they would share the kubelet's ports and the cgroup.
func nodeAlone() error {
	for _, p := range cgroupPidsNamed(nodeCgroup, "kubelet") {
		return fmt.Errorf("a kubelet (pid %d) already runs in this namespace: one real node at a time", p)
	}
	return nil
}

// Stop stops the node's processes in reverse start order, the pods as
// soon as the kubelet is gone (they watch the API server too: CoreDNS,
// istio-aux), then what outlives them all (stopNode).
func (n *Node) Stop() error {
	var errs []error
	for i := len(n.procs) - 1; i >= 0; i-- {
		if err := n.procs[i].Stop(); err != nil {
			errs = append(errs, err)
		}
		if n.procs[i].name == "kubelet" {
			errs = append(errs, n.killPods())
		}
	}
	n.procs = nil
	errs = append(errs, n.stopNode())
	return errors.Join(errs...)
}

// killPods kills the real node's pods, which the kubelet leaves running
// when it stops. The kubelet must be gone, or it would start them again.
func (n *Node) killPods() error {
	if n.c == nil {
		return nil
	}
	pods := filepath.Join(n.cgroup, "kubepods")
	return killAll(func() map[int]bool { return cgroupPids(pods) }, 15*time.Second)
}

// stopNode runs after the node's processes stopped. containerd's shims
// outlive containerd: kill them (and any pod still there), remove the
// pods' cgroups so the next node starts clean, and unmount what the kubelet
// and containerd mounted under the cluster dir (the kubelet's root dir on
// itself, volumes, rootfs overlays, pod network namespaces), which would
// keep the dir from being removed.
func (n *Node) stopNode() error {
	if n.c == nil {
		return nil
	}
	pods := filepath.Join(n.cgroup, "kubepods")
	err := killAll(func() map[int]bool {
		pids := cgroupPids(pods)
		for _, p := range cgroupPidsNamed(filepath.Join(n.cgroup, "harness"), "containerd-shim-runc-v2") {
			pids[p] = true
		}
		return pids
	}, 15*time.Second)
	errs := []error{err}
	errs = append(errs, cluster.Poll(context.Background(), 100*time.Millisecond, 5*time.Second, func(context.Context) (bool, error) {
		return removeCgroup(pods) == nil, nil
	}))
	errs = append(errs, unmountUnder(n.dir))
	return errors.Join(errs...)
}

// cgroupPidsNamed lists the processes below cgroup root whose executable
// has that base name.
func cgroupPidsNamed(root, name string) []int {
	var out []int
	for pid := range cgroupPids(root) {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err == nil && filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == name {
			out = append(out, pid)
		}
	}
	return out
}

// unmountUnder detaches every mount at or below dir in this mount
// namespace, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	mounts, err := mountPoints(f, func(_, mp string) bool { return mp == dir || strings.HasPrefix(mp, dir+"/") })
	f.Close()
	if err != nil {
		return err
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	var errs []error
	for _, mp := range mounts {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
