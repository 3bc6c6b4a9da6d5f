package realnode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// run is one RunInNetns in the parent: its cgroup and state directory carry
// its name, istio-aux-node-<parent pid>, and the state directory holds the
// handle of its network namespace (a bind mount of the namespace on the
// file "netns"), so that a later run can find and remove them all if this
// one crashes. Not `ip netns add`: that makes /run/netns a shared mount of
// its own that nobody can tell when to remove; from the host, enter the
// namespace with `nsenter --net=/tmp/istio-aux-node-<pid>/netns`.
type run struct {
	name string
	// runRecord is kept in the state directory as run.json.
	runRecord
}

// runRecord is what a later Cleanup needs to know about a run.
type runRecord struct {
	Pid int `json:"pid"`
	// Start is the parent's start time (/proc/<pid>/stat), to tell a live
	// run from a dead one whose pid was reused.
	Start string `json:"start"`
	// Cgroup is the run's cgroup root, the same path in every hierarchy:
	// the kubelet's cgroupRoot, with the harness in Cgroup/harness.
	Cgroup string `json:"cgroup"`
	// CreatedCgroupDirs are the ancestors of Cgroup this run created (a
	// hierarchy where this process sat higher up); removed when empty.
	CreatedCgroupDirs []string `json:"createdCgroupDirs,omitempty"`
}

// The main thread stands for the process: /proc/<pid>/ns/net is its
// namespace, which `ip link ... netns <pid>` (plugIn) and whoever enters
// this process's namespaces read. A goroutine that moves its thread into
// another namespace (newNetns, Node.DialContext) must never be on it: the
// main goroutine keeps it.
func init() { runtime.LockOSThread() }

func (r *run) netnsPath() string { return netnsPathOf(r.name) }
func (r *run) stateDir() string  { return stateDirOf(r.name) }

func stateDirOf(name string) string  { return filepath.Join(os.TempDir(), name) }
func netnsPathOf(name string) string { return filepath.Join(stateDirOf(name), "netns") }

// newRun creates the state directory first (so that a concurrent Cleanup
// never takes a starting run for a dead one), then the cgroup and the
// network namespace with loopback and the LAN up: the control plane's
// machine, which the nodes plug into (machine.go).
func newRun(pid int) (r *run, err error) {
	r = &run{name: netnsPrefix + strconv.Itoa(pid)}
	r.Pid = pid
	if r.Start, err = startTime(pid); err != nil {
		return nil, err
	}
	base, err := cgroupBase()
	if err != nil {
		return nil, err
	}
	r.Cgroup = filepath.Join(base, r.name)
	if err := os.MkdirAll(r.stateDir(), 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = r.sweep(os.Stderr)
		}
	}()
	if r.CreatedCgroupDirs, err = makeCgroup(r.Cgroup, "harness"); err != nil {
		return r, err
	}
	if err := r.save(); err != nil {
		return r, err
	}
	if err := newNetns(r.netnsPath()); err != nil {
		return r, fmt.Errorf("creating a network namespace: %w", err)
	}
	steps := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", lanBridge, "type", "bridge"},
		{"addr", "add", ControlPlaneIP + "/24", "dev", lanBridge},
		{"link", "set", lanBridge, "up"},
		// The nodes will need veth pairs: prove the kernel has them.
		{"link", "add", "ia-probe0", "type", "veth", "peer", "name", "ia-probe1"},
		{"link", "del", "ia-probe0"},
	}
	for _, args := range steps {
		if err := runCmd(append([]string{"nsenter", "--net=" + r.netnsPath(), "ip"}, args...)...); err != nil {
			return r, err
		}
	}
	return r, nil
}

// newNetns creates a network namespace and keeps it alive by bind-mounting
// it on file.
func newNetns(file string) error {
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return err
	}
	return inNetns(func() error { return syscall.Unshare(syscall.CLONE_NEWNET) }, func() error {
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid())
		return syscall.Mount(src, file, "", syscall.MS_BIND, "")
	})
}

// inNetns runs fn on a thread of this process that enter moved into a
// network namespace (a new one, or another's), locked to its goroutine,
// and moves the thread back before it is unlocked: no other code ever runs
// in the namespace by accident, and the thread lives on. (A thread that
// ended would SIGKILL every process it had started: their parent-death
// signal follows the thread, not the process.) If it cannot go back, it
// stays locked and ends with its goroutine. Never the main thread: init
// keeps it for the main goroutine. What fn makes (a socket, a mount)
// belongs to the namespace it was made in.
func inNetns(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer back.Close()
		if err := enter(); err != nil {
			if unix.Setns(int(back.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			}
			errc <- err
			return
		}
		err = fn()
		if unix.Setns(int(back.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

func (r *run) save() error {
	b, err := json.Marshal(r.runRecord)
	if err != nil {
		return err
	}
	tmp := filepath.Join(r.stateDir(), "run.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(r.stateDir(), "run.json"))
}

// loadRun reads a run's record; ok is false when there is none.
func loadRun(name string) (r *run, ok bool, err error) {
	r = &run{name: name}
	b, err := os.ReadFile(filepath.Join(stateDirOf(name), "run.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	return r, true, json.Unmarshal(b, &r.runRecord)
}

// startTime is field 22 of /proc/<pid>/stat, in clock ticks since boot.
func startTime(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return fields[19], nil
}
