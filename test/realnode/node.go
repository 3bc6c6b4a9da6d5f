// Package realnode is the test harness's real nodes (New), which make
// test/cluster's control plane a whole cluster, as kubeadm would give one:
// one to sixteen nodes, each a machine of its own (machine.go: a network
// namespace on the cluster's LAN, a mount namespace, a cgroup) running
// containerd, runc, the kubelet and kube-proxy; an image registry every
// image is pulled from (PushImage, KoResolve), local volumes and CoreDNS
// (whole.go). All of it lives in a network namespace of the test binary's
// own (RunInNetns, netns.go), whose crashed runs the next one sweeps
// (Cleanup, nodeclean.go). A node can be powered off, partitioned, healed
// and powered on again (Node). Tests that need nodes call RequireNode;
// programs ask NodeUnavailable.
package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// MaxNodes is how many nodes the addresses leave room for: sixteen /20s
// of pods in ClusterCIDR.
const MaxNodes = 16

// Nodes are the real nodes of a whole cluster, a cluster.Node: what they
// share runs as the cluster's processes in the control plane's namespace
// (the registry, logged "registry|"), each node's as processes of that
// node (logged "kubelet|" on a single node, "node-1/kubelet|" on several).
// All of their files are under the cluster dir. One serves one cluster.
type Nodes struct {
	c     *cluster.Cluster   // set by Start once the nodes may run here
	dir   string             // the cluster's work dir
	procs []*cluster.Process // the cluster-wide ones
	nodes []*Node
}

// New returns n real nodes (1 to MaxNodes) for cluster.Options.Node,
// named node-0, node-1, …, with a registry every image is pulled from
// (PushImage), local volumes and CoreDNS. kubelets[i], when given and not
// "", is the Kubernetes version of node i's kubelet and kube-proxy (one of
// cluster.K8sVersions; hack/build-k8s.sh VERSION builds them); the others
// run the control plane's. The process must run inside RunInNetns; tests
// call RequireNode first.
func New(n int, kubelets ...string) *Nodes {
	n = max(1, min(n, MaxNodes))
	ns := &Nodes{}
	for i := range n {
		node := &Node{nodes: ns, index: i, name: fmt.Sprintf("node-%d", i)}
		if i < len(kubelets) {
			node.version = kubelets[i]
		}
		ns.nodes = append(ns.nodes, node)
	}
	return ns
}

var _ cluster.Node = (*Nodes)(nil)

// WorkDirBase is the run's state directory, which the parent removes even
// if this process dies.
func (ns *Nodes) WorkDirBase() string {
	if insideNetns == "" {
		return ""
	}
	return stateDirOf(insideNetns)
}

// IP is ControlPlaneIP, where kube-apiserver serves the nodes.
func (ns *Nodes) IP() string { return ControlPlaneIP }

// Names are the nodes' names, in start order.
func (ns *Nodes) Names() []string {
	out := make([]string, len(ns.nodes))
	for i, n := range ns.nodes {
		out[i] = n.name
	}
	return out
}

// Node is the node named name, or nil.
func (ns *Nodes) Node(name string) *Node {
	for _, n := range ns.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// Start makes the control plane a whole cluster: the registry, then every
// node at once (its machine, containerd, the kubelet Ready, kube-proxy),
// the local volumes, then the cluster DNS as pods (the scheduler places
// them, the nodes pull their image). Every step waits until the part it
// started works.
func (ns *Nodes) Start(ctx context.Context, c *cluster.Cluster) error {
	if insideNetns == "" {
		return fmt.Errorf("real nodes run only inside RunInNetns's network namespace (%s)", nodeUnavailable)
	}
	ns.c, ns.dir = c, c.Dir()
	var took []string
	for _, step := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"registry", ns.startRegistry},
		{"node RBAC and certificates", ns.prepare},
		{fmt.Sprintf("%d node(s) Ready", len(ns.nodes)), ns.bootAll},
		{"volumes", ns.startVolumes},
		{"cluster DNS", ns.startClusterDNS},
	} {
		start := time.Now()
		if err := step.run(ctx); err != nil {
			return fmt.Errorf("real nodes, %s: %w", step.name, err)
		}
		took = append(took, fmt.Sprintf("%s %s", step.name, time.Since(start).Round(time.Millisecond)))
	}
	fmt.Fprintf(c.Log(), "harness| real nodes up: %s\n", strings.Join(took, ", "))
	return nil
}

// bootAll boots every node at once, each with its version's binaries.
func (ns *Nodes) bootAll(ctx context.Context) error {
	for _, n := range ns.nodes {
		for _, b := range []string{"kubelet", "kube-proxy"} {
			if _, err := os.Stat(n.bin(b)); err != nil {
				return fmt.Errorf("%s: %s %s missing (run hack/build-k8s.sh %s): %w", n.name, b, n.Version(), n.Version(), err)
			}
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range ns.nodes {
		g.Go(func() error {
			if err := n.boot(gctx); err != nil {
				return fmt.Errorf("%s: %w", n.name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

func (ns *Nodes) path(name string) string { return filepath.Join(ns.dir, name) }

// start starts one of the cluster-wide processes, in the control plane's
// namespace.
func (ns *Nodes) start(name, path string, args ...string) (*cluster.Process, error) {
	p, err := ns.c.StartProcess(name, nil, path, args...)
	if err != nil {
		return nil, err
	}
	ns.procs = append(ns.procs, p)
	return p, nil
}

// NodeCgroup is node name's cgroup root, the same path below every cgroup
// hierarchy's mount point: its pods are in NodeCgroup(name)/kubepods,
// containerd, its shims, the kubelet and kube-proxy in
// NodeCgroup(name)/system. It is "" outside RunInNetns's namespace.
func NodeCgroup(name string) string {
	if nodeCgroup == "" {
		return ""
	}
	return filepath.Join(nodeCgroup, name)
}

// Stop stops every node (its processes in reverse start order, the pods as
// soon as the kubelet is gone, then everything left in its cgroup), then
// the cluster-wide processes.
func (ns *Nodes) Stop() error {
	var errs []error
	for _, n := range ns.nodes {
		errs = append(errs, n.stop())
	}
	for i := len(ns.procs) - 1; i >= 0; i-- {
		errs = append(errs, ns.procs[i].Stop())
	}
	ns.procs = nil
	return errors.Join(errs...)
}

// unmountWhere detaches every mount of this mount namespace that keep
// accepts, deepest first.
func unmountWhere(keep func(fstype, mountPoint string) bool) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	mounts, err := mountPoints(f, keep)
	f.Close()
	if err != nil {
		return err
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	var errs []error
	for _, mp := range mounts {
		errs = append(errs, detach(mp))
	}
	return errors.Join(errs...)
}

// detach unmounts path lazily; nothing mounted there is no error.
func detach(path string) error {
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("unmounting %s: %w", path, err)
	}
	return nil
}

// runCmd runs a command, with its output in the error.
func runCmd(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space), which
// are Go's too.
func unescapeMount(s string) string {
	if u, err := strconv.Unquote(`"` + s + `"`); err == nil {
		return u
	}
	return s
}
