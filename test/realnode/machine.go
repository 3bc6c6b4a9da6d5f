package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/poll"
)

// Node is one real node, a machine of its own:
//   - a network namespace whose eth0 is plugged into the cluster's LAN at
//     IP() and whose pod bridge holds PodCIDR(), with routes to the other
//     nodes' pods through their addresses, as a host-gw network sets them;
//   - a mount namespace with its own /run, /var/log, /var/lib/kubelet and
//     /var/lib/cni (the machine's memory-backed and local directories,
//     where the kubelet and containerd write whatever dirs they are given),
//     kept alive by a holder process (hold);
//   - a cgroup, NodeCgroup(name): its daemons in system, its pods in
//     kubepods.
//
// Its processes (containerd, the kubelet, kube-proxy, and the holder) are
// the cluster's processes, entered into the node's namespaces by nsenter.
// PowerOff, Partition, Heal and PowerOn are the faults a node suffers.
type Node struct {
	nodes *Nodes
	index int
	name  string
	// version is the kubelet's and kube-proxy's, "" the control plane's.
	version string

	mu     sync.Mutex
	holder *cluster.Process
	procs  []*cluster.Process
	socket string // containerd's
	off    bool
}

// Name is the node's name (the kubelet's hostname override).
func (n *Node) Name() string { return n.name }

// Version is the Kubernetes version of the node's kubelet and kube-proxy.
func (n *Node) Version() string {
	if n.version == "" {
		return n.nodes.c.Version()
	}
	return n.version
}

// bin is the path of the node's Kubernetes binary name, of its version.
func (n *Node) bin(name string) string { return filepath.Join(cluster.K8sBinDirOf(n.Version()), name) }

// IP is the node's address on the LAN: its InternalIP, where the kubelet
// serves.
func (n *Node) IP() string { return fmt.Sprintf("10.87.0.%d", 10+n.index) }

// PodCIDR is the range the node's pods get their addresses from.
func (n *Node) PodCIDR() string { return fmt.Sprintf("10.88.%d.0/20", 16*n.index) }

// gateway is the pod bridge's address, the pods' way to the rest.
func (n *Node) gateway() string { return fmt.Sprintf("10.88.%d.1", 16*n.index) }

// port is the LAN's end of the node's link, in the control plane's
// namespace.
func (n *Node) port() string { return "ia-" + n.name }

func (n *Node) dir() string              { return filepath.Join(n.nodes.dir, n.name) }
func (n *Node) path(name string) string  { return filepath.Join(n.dir(), name) }
func (n *Node) netns() string            { return filepath.Join(stateDirOf(insideNetns), n.name+".netns") }
func (n *Node) cgroup() string           { return NodeCgroup(n.name) }
func (n *Node) system() string           { return filepath.Join(n.cgroup(), "system") }
func (n *Node) procName(p string) string { return n.nodes.procName(n.name, p) }

// procName names a node's process in the log and in the cluster's Pids:
// as it is on a single node, prefixed with the node's name on several.
func (ns *Nodes) procName(node, p string) string {
	if len(ns.nodes) == 1 {
		return p
	}
	return node + "/" + p
}

// boot starts the machine, containerd, the kubelet (until its node is
// Ready) and kube-proxy.
func (n *Node) boot(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, step := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"machine", n.startMachine},
		{"containerd", n.startContainerd},
		{"kubelet Ready", n.startKubelet},
		{"kube-proxy", n.startKubeProxy},
	} {
		if err := step.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
	}
	n.off = false
	return nil
}

// startMachine makes the node's cgroup, network and mount namespace.
func (n *Node) startMachine(ctx context.Context) error {
	if err := os.MkdirAll(n.dir(), 0o755); err != nil {
		return err
	}
	if _, err := makeCgroup(n.cgroup(), "system"); err != nil {
		return err
	}
	if err := n.plugIn(); err != nil {
		return err
	}
	return n.startHolder(ctx)
}

// plugIn creates the node's network namespace, links it to the LAN and
// routes: the node to the others' pods, the control plane (and through it
// the other nodes) to this node's pods. Its pods reach the Service range
// through the node, where kube-proxy's rules are: the node's own processes
// need a route to that range too (there is no default route to carry it).
func (n *Node) plugIn() error {
	if err := newNetns(n.netns()); err != nil {
		return fmt.Errorf("creating its network namespace: %w", err)
	}
	in := func(args ...string) []string { return append([]string{"nsenter", "--net=" + n.netns()}, args...) }
	steps := [][]string{
		in("ip", "link", "set", "lo", "up"),
		in("ip", "link", "add", "eth0", "type", "veth", "peer", "name", n.port(), "netns", strconv.Itoa(os.Getpid())),
		in("ip", "addr", "add", n.IP()+"/24", "dev", "eth0"),
		in("ip", "link", "set", "eth0", "up"),
		in("ip", "link", "add", bridgeName, "type", "bridge"),
		in("ip", "addr", "add", n.gateway()+"/20", "dev", bridgeName),
		in("ip", "link", "set", bridgeName, "up"),
		in("ip", "route", "add", cluster.ServiceCIDR, "dev", bridgeName),
		// A router between its pods and the LAN (the CNI bridge plugin
		// would set it only at the first pod).
		in("sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"),
		{"ip", "link", "set", n.port(), "master", lanBridge},
		{"ip", "link", "set", n.port(), "up"},
		{"ip", "route", "replace", n.PodCIDR(), "via", n.IP()},
	}
	for _, o := range n.nodes.nodes {
		if o != n {
			steps = append(steps, in("ip", "route", "add", o.PodCIDR(), "via", o.IP()))
		}
	}
	for _, args := range steps {
		if err := runCmd(args...); err != nil {
			return err
		}
	}
	return nil
}

// unplug removes the node's link (both ends of it: a veth pair goes as a
// whole) and lets its network namespace go.
func (n *Node) unplug() error {
	err := runCmd("ip", "link", "del", n.port())
	if err != nil && strings.Contains(err.Error(), "Cannot find device") {
		err = nil
	}
	return errors.Join(err, detach(n.netns()))
}

// envHolder marks a node's holder (hold); its value is the file the holder
// writes once the node's mount namespace is ready.
const envHolder = "ISTIO_AUX_NODE_HOLDER"

// startHolder starts the process that holds the node's mount namespace:
// this binary again (RunInNetns sees envHolder), in the node's network
// namespace and a new mount namespace, and waits until it has set it up.
func (n *Node) startHolder(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	ready := n.path("holder.ready")
	_ = os.Remove(ready)
	p, err := n.nodes.c.StartProcess(n.procName("holder"), []string{envHolder + "=" + ready},
		"nsenter", "--net="+n.netns(), "--", "unshare", "--mount", "--propagation", "private", "--", exe)
	if err != nil {
		return err
	}
	n.holder = p
	if err := joinCgroupPid(p.Pid(), n.system()); err != nil {
		return err
	}
	return p.WaitUp(ctx, 30*time.Second, func(context.Context) error {
		_, err := os.Stat(ready)
		return err
	})
}

// hold is a node's holder process. unshare gave it a mount namespace of its
// own, which it makes the node's: the handles of every network namespace
// it inherited go (so that a node powered off loses its network whatever
// else runs), and /run, /var/log, /var/lib/kubelet and /var/lib/cni become
// the node's own, and so do /etc/cni/net.d and /opt/cni/bin, the node's
// CNI configuration and plugins, on its disk (cniDirs). Then it says so in the file ready and waits to be
// stopped or killed; the node's processes enter its namespaces.
func hold(ready string) int {
	_ = os.Unsetenv(envHolder)
	err := func() error {
		if err := ownMountNamespace(); err != nil {
			return err
		}
		if err := unmountWhere(func(fstype, _ string) bool { return fstype == "nsfs" }); err != nil {
			return err
		}
		for _, dir := range privateDirs {
			if err := mountTmpfs(dir); err != nil {
				return err
			}
		}
		if err := shadow("/var/lib", "/run/istio-aux-shadow/var-lib", "kubelet", "cni"); err != nil {
			return err
		}
		if err := cniDirs(filepath.Dir(ready)); err != nil {
			return err
		}
		return os.WriteFile(ready, []byte(strconv.Itoa(os.Getpid())), 0o600)
	}()
	if err != nil {
		fmt.Fprintf(os.Stderr, "node holder: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	return 0
}

// The node's CNI directories, where a cluster's CNI agents (Istio's among
// them) expect them: on the node's disk (its directory), mounted at the
// standard paths inside its mount namespace only. The machine has neither
// /etc/cni nor /opt/cni, and must not get them: /etc and /opt are shadowed
// (their entries mounted back) so that the node can have its own.
const (
	cniConfDir = "/etc/cni/net.d"
	cniBinDir  = "/opt/cni/bin"
)

// cniDirs mounts the node's cni (configuration) and cni-bin (plugins)
// directories under nodeDir at cniConfDir and cniBinDir.
func cniDirs(nodeDir string) error {
	for _, d := range []struct{ top, keep, src, dst string }{
		{"/etc", "/run/istio-aux-shadow/etc", filepath.Join(nodeDir, "cni"), cniConfDir},
		{"/opt", "/run/istio-aux-shadow/opt", filepath.Join(nodeDir, "cni-bin"), cniBinDir},
	} {
		if err := shadow(d.top, d.keep, "cni"); err != nil {
			return err
		}
		for _, dir := range []string{d.src, d.dst} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		if err := syscall.Mount(d.src, d.dst, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s on %s: %w", d.src, d.dst, err)
		}
	}
	return nil
}

// start starts one of the node's processes in its namespaces and cgroup.
func (n *Node) start(name, path string, args ...string) (*cluster.Process, error) {
	if n.holder == nil {
		return nil, fmt.Errorf("%s is off", n.name)
	}
	target := "--target=" + strconv.Itoa(n.holder.Pid())
	p, err := n.nodes.c.StartProcess(n.procName(name), nil, "nsenter", append([]string{target, "--net", "--mount", "--", path}, args...)...)
	if err != nil {
		return nil, err
	}
	n.procs = append(n.procs, p)
	if err := joinCgroupPid(p.Pid(), n.system()); err != nil {
		_ = p.Kill()
		return nil, err
	}
	return p, nil
}

// PowerOff is the node losing its power: its link goes down first (no
// packet leaves it once the fault has begun), then every process of it
// (the kubelet, containerd, the shims, its pods, kube-proxy, the holder) is
// SIGKILLed at once, and with its mount namespace goes everything the
// kubelet and containerd had mounted or kept in memory-backed directories.
// Its disk stays: containerd's images and snapshots, the kubelet's root
// dir, the pods' logs. Nothing tells the control plane.
func (n *Node) PowerOff() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	_ = exec.Command("ip", "link", "set", n.port(), "down").Run()
	errs := []error{killAll(func() map[int]bool { return cgroupPids(n.cgroup()) }, 15*time.Second)}
	errs = append(errs, n.unplug(), removeCgroupSoon(filepath.Join(n.cgroup(), "kubepods")))
	n.procs, n.holder, n.off = nil, nil, true
	return errors.Join(errs...)
}

// PowerOn boots a node that was powered off, as a machine boots: what
// lived in memory is gone (containerd's and runc's state, which a real
// node keeps under /run), what was on its disk is kept, and the kubelet
// finds its pods in the API server and starts them again.
func (n *Node) PowerOn(ctx context.Context) error {
	n.mu.Lock()
	off := n.off
	n.mu.Unlock()
	if !off {
		return fmt.Errorf("%s is not off", n.name)
	}
	for _, d := range []string{"containerd/state", "containerd/runc"} {
		if err := os.RemoveAll(n.path(d)); err != nil {
			return err
		}
	}
	return n.boot(ctx)
}

// Partition cuts the node off the LAN: its processes and pods go on
// running, but reach nothing off the node, and nothing reaches them.
func (n *Node) Partition() error { return n.link("down") }

// Heal ends a Partition.
func (n *Node) Heal() error { return n.link("up") }

func (n *Node) link(state string) error { return runCmd("ip", "link", "set", n.port(), state) }

// stop stops the node for good: kube-proxy and the kubelet are told to
// stop (the pods stay, as when a kubelet stops), then everything still in
// its cgroup is killed (the pods, containerd, its shims, the holder), and
// its cgroup and network go.
func (n *Node) stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for i := len(n.procs) - 1; i >= 0; i-- {
		if name := n.procs[i].Name(); name == n.procName("kube-proxy") || name == n.procName("kubelet") {
			errs = append(errs, n.procs[i].Stop())
		}
	}
	if n.nodes.c != nil && n.cgroup() != "" {
		errs = append(errs, killAll(func() map[int]bool { return cgroupPids(n.cgroup()) }, 15*time.Second))
		errs = append(errs, removeCgroupSoon(n.cgroup()))
		errs = append(errs, n.unplug())
	}
	n.procs, n.holder, n.off = nil, nil, true
	return errors.Join(errs...)
}

// removeCgroupSoon removes a cgroup once the processes killed in it have
// left (a moment after SIGKILL lands).
func removeCgroupSoon(root string) error {
	err := poll.Until(context.Background(), 5*time.Second, func(context.Context) (bool, error) {
		return removeCgroup(root) == nil, nil
	})
	if err != nil {
		return removeCgroup(root)
	}
	return nil
}

// DialContext dials from inside the node's network namespace, as one of
// its processes would: a Service's cluster IP goes through the node's
// kube-proxy rules. addr must be an IP address: a name would be looked up
// outside. The connection, once made, may be used from anywhere.
func (n *Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	target, err := os.Open(n.netns())
	if err != nil {
		return nil, err
	}
	defer target.Close()
	var conn net.Conn
	err = inNetns(func() error {
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering %s's network namespace: %w", n.name, err)
		}
		return nil
	}, func() (err error) {
		conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}
