package realnode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// The real nodes (cluster.Options.Node) and everything that talks to them run
// inside a network namespace that RunInNetns creates, so that nothing the
// kubelets, containerd, the CNI plugins or the tests do reaches the machine's
// own network: the bridges, the veths, iptables rules and ip_forward live
// and die with the namespaces, and 127.0.0.1 inside is private to the run.
//
// That namespace is the control plane's machine: etcd, kube-apiserver, the
// controllers, the registry and the test binary itself, on ControlPlaneIP
// of a bridge, the cluster's LAN. Each node is a machine of its own
// (machine.go): a network namespace plugged into the LAN, a mount namespace
// and a cgroup of its own.
//
// The test binary re-executes itself inside: the parent (outside) creates
// the namespace, its LAN and a cgroup, runs the child through
// `nsenter --net` in a fresh private mount namespace, waits, and removes
// whatever the child left (see nodeclean.go). Not `ip netns exec`: it
// remounts /sys for the namespace, and the cgroup hierarchies mounted under
// /sys/fs/cgroup are gone in the child, where the kubelet and runc need
// them. The child mounts private tmpfs over /run and /var/log, so that what
// it starts writes there for this run only.
const (
	// envNetns marks the child; its value is the namespace's name.
	envNetns = "ISTIO_AUX_NODE_NETNS"
	// envCgroup is the child's cgroup root, relative to every hierarchy.
	envCgroup = "ISTIO_AUX_NODE_CGROUP"
	// netnsPrefix starts the name of every namespace, cgroup and state
	// directory of a run; the parent's pid ends it.
	netnsPrefix = "istio-aux-node-"
)

// Addresses of the cluster. The control plane's machine is ControlPlaneIP
// on the LAN (LANCIDR): kube-apiserver advertises it and the registry
// serves on it; node i is 10.87.0.(10+i) there. Node i's pods get
// addresses in 10.88.(16i).0/20 of ClusterCIDR and no default route: a
// route to the cluster's pods, its Services and the LAN, through their
// node, as a host-gw network would set them.
const (
	ControlPlaneIP = "10.87.0.1"
	LANCIDR        = "10.87.0.0/24"
	ClusterCIDR    = "10.88.0.0/16"
	// lanBridge is the LAN, in the control plane's namespace; bridgeName is
	// each node's pod bridge, in the node's.
	lanBridge  = "ia-lan"
	bridgeName = "ia-br0"
)

// insideNetns is the namespace's name when this process is the child, and
// nodeCgroup its cgroup root. Both are taken from the environment once and
// removed from it, so that programs the child starts (another test binary)
// do not take themselves for the child.
var (
	insideNetns = os.Getenv(envNetns)
	nodeCgroup  = os.Getenv(envCgroup)
)

// nodeUnavailable says why this process cannot run a real node, when it
// cannot; RequireNode reports it.
var nodeUnavailable = "RunInNetns was not called (TestMain must call it)"

// RunInNetns runs run (a test binary's m.Run, or a program's main) inside a
// new network namespace where a real node (New) can start, and returns its
// exit code. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(realnode.RunInNetns(m.Run)) }
//
// It first removes what crashed earlier runs left (Cleanup). Where the
// machine cannot host a real node (not root, binaries or kernel features
// missing) it says why on stderr and calls run in this process;
// RequireNode then skips the tests, or fails them when CI=true.
func RunInNetns(run func() int) int {
	if ready := os.Getenv(envHolder); ready != "" {
		return hold(ready)
	}
	if insideNetns != "" {
		if err := enterChild(insideNetns); err != nil {
			fmt.Fprintf(os.Stderr, "real node: %v\n", err)
			return 1
		}
		nodeUnavailable, childNetns = "", insideNetns
		return run()
	}
	if why := nodeSupport(); why != "" {
		nodeUnavailable = why
		fmt.Fprintf(os.Stderr, "real node unavailable: %s\n", why)
		return run()
	}
	if err := Cleanup(os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "real node: cleaning up earlier runs: %v\n", err)
	}
	r, err := newRun(os.Getpid())
	if err != nil {
		nodeUnavailable = err.Error()
		fmt.Fprintf(os.Stderr, "real node unavailable: %v\n", err)
		return run()
	}
	code, err := r.runChild()
	if err != nil {
		fmt.Fprintf(os.Stderr, "real node: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if err := r.sweep(os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "real node: cleaning up: %v\n", err)
	}
	return code
}

// NodeUnavailable says why this process cannot start a real node, or ""
// when it can (it runs inside RunInNetns's namespace): what a program
// checks where a test calls RequireNode.
func NodeUnavailable() string { return nodeUnavailable }

// childNetns is the namespace this process was re-executed in, if any.
var childNetns string

// NetnsPath is the network namespace this process runs in (RunInNetns's
// child), for a person to enter it with nsenter --net; "" outside one.
func NetnsPath() string {
	if childNetns == "" {
		return ""
	}
	return netnsPathOf(childNetns)
}

// TB is the part of testing.TB that RequireNode uses.
type TB interface {
	Helper()
	Skip(args ...any)
	Fatal(args ...any)
}

// RequireNode skips t unless this process can start a real node (it runs
// inside RunInNetns's namespace). With CI=true a missing node is a failure.
func RequireNode(t TB) {
	t.Helper()
	if nodeUnavailable == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("real node unavailable (CI=true makes this a failure): " + nodeUnavailable)
	}
	t.Skip("real node unavailable: " + nodeUnavailable)
}

// runChild re-executes this binary inside the namespace and waits for it.
// SIGINT and SIGTERM are passed on, so the child stops its cluster in order
// and the parent still cleans up after it.
func (r *run) runChild() (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 1, err
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + r.netnsPath(), "--", exe}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), envNetns+"="+r.name, envCgroup+"="+r.Cgroup)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// A private mount namespace (Go makes / recursively private in it):
	// mounts made inside never reach the machine and vanish with the child.
	// A process group of its own: a terminal's Ctrl-C reaches the child once,
	// passed on below, not twice.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("starting the test binary in %s: %w", r.name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case err := <-done:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				if exit.ExitCode() >= 0 {
					return exit.ExitCode(), nil
				}
				return 1, fmt.Errorf("test binary in %s: %w", r.name, err)
			}
			return 0, err
		}
	}
}

// enterChild checks that this process really is in the run's network
// namespace and in a mount namespace of its own (else mounting over /run
// would hide the machine's), joins the run's cgroup, and mounts the private
// directories.
func enterChild(name string) error {
	want, err := inode(netnsPathOf(name))
	if err != nil {
		return err
	}
	if got, err := inode("/proc/self/ns/net"); err != nil || got != want {
		return fmt.Errorf("not inside network namespace %s (%w)", name, err)
	}
	if err := ownMountNamespace(); err != nil {
		return err
	}
	// kubectl caches discovery in ~/.kube/cache, keyed by the API server's
	// 127.0.0.1 port, which only exists in here.
	if err := os.Setenv("KUBECACHEDIR", filepath.Join(stateDirOf(name), "kube-cache")); err != nil {
		return err
	}
	_ = os.Unsetenv(envNetns)
	_ = os.Unsetenv(envCgroup)
	if nodeCgroup == "" {
		return errors.New(envCgroup + " is not set")
	}
	if err := joinCgroup(filepath.Join(nodeCgroup, "harness")); err != nil {
		return err
	}
	for _, dir := range privateDirs {
		if err := mountTmpfs(dir); err != nil {
			return err
		}
	}
	return nil
}

// privateDirs get a tmpfs of their own in the child, and again in each
// node's mount namespace: containerd 1.6 puts shim sockets under
// /run/containerd/s whatever its state dir, and the kubelet links
// container logs in /var/log/containers whatever its podLogsDir.
var privateDirs = []string{"/run", "/var/log"}

func mountTmpfs(dir string) error {
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=755"); err != nil {
		return fmt.Errorf("mounting a private tmpfs on %s: %w", dir, err)
	}
	return nil
}

// shadow makes the entries named hidden of dir private to this mount
// namespace while the rest of dir stays the machine's: the kubelet opens its device
// plugin socket in /var/lib/kubelet/device-plugins whatever its root dir,
// and containerd's CNI library caches results in /var/lib/cni. dir is
// bind-mounted to keep (a path on a private tmpfs), a tmpfs goes over dir,
// and every other entry is bind-mounted back from keep.
func shadow(dir, keep string, hidden ...string) error {
	if err := os.MkdirAll(keep, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount(dir, keep, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s: %w", dir, err)
	}
	entries, err := os.ReadDir(keep)
	if err != nil {
		return err
	}
	if err := mountTmpfs(dir); err != nil {
		return err
	}
	for _, e := range entries {
		if slices.Contains(hidden, e.Name()) {
			continue
		}
		src, dst := filepath.Join(keep, e.Name()), filepath.Join(dir, e.Name())
		switch {
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(target, dst)
			}
			if err != nil {
				return err
			}
			continue
		case e.IsDir():
			err = os.Mkdir(dst, 0o755)
		default:
			err = os.WriteFile(dst, nil, 0o644)
		}
		if err != nil {
			return err
		}
		if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mounting %s back: %w", dst, err)
		}
	}
	return nil
}

// ownMountNamespace fails unless this process is in another mount
// namespace than its parent.
func ownMountNamespace() error {
	self, err := inode("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	if parent, err := inode("/proc/" + strconv.Itoa(os.Getppid()) + "/ns/mnt"); err != nil || parent == self {
		return fmt.Errorf("not in a mount namespace of its own (%w)", err)
	}
	return nil
}

func inode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
