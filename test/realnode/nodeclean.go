package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/istio-aux/istio-aux/test/poll"
)

// Cleanup removes what earlier real-node runs left on this machine when
// they crashed or were killed: their processes (containerd shims, pod
// containers, anything still in their network namespace or cgroup), their
// cgroups, network namespaces and state directories. Live runs are left
// alone, so it is safe while another run goes on. RunInNetns calls it at
// every start; it reports what it removed to log.
func Cleanup(log io.Writer) error {
	var errs []error
	for _, name := range staleRuns() {
		r, _, err := loadRun(name)
		if err != nil {
			errs = append(errs, err)
		}
		fmt.Fprintf(log, "real node: removing what the dead run %s left\n", name)
		if err := r.sweep(log); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// staleRuns names the runs that left something behind and whose parent is
// gone (or is another process that reused the pid).
func staleRuns() []string {
	names := map[string]bool{}
	add := func(pattern string) {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			names[filepath.Base(m)] = true
		}
	}
	add(filepath.Join(os.TempDir(), netnsPrefix+"*"))
	mounts, _ := cgroupMounts()
	base, _ := cgroupBase()
	for _, m := range mounts {
		add(filepath.Join(m, netnsPrefix+"*"))
		add(filepath.Join(m, base, netnsPrefix+"*"))
	}
	var out []string
	for name := range names {
		if !runAlive(name) {
			out = append(out, name)
		}
	}
	return out
}

func runAlive(name string) bool {
	pid, err := strconv.Atoi(strings.TrimPrefix(name, netnsPrefix))
	if err != nil {
		return false // not one of ours after all; the glob was loose
	}
	if pid == os.Getpid() {
		return true
	}
	start, err := startTime(pid)
	if err != nil {
		return false // no such process
	}
	r, ok, err := loadRun(name)
	if err != nil || !ok {
		// A run writes its record before anything else: none with a live
		// pid is a run still starting.
		return err == nil
	}
	return r.Start == start
}

// sweep removes everything of run r: it kills every process in its
// network namespace or cgroup (the child is gone by then; what is left is
// shims, pods and anything that outlived a crash), then removes the
// cgroups, the namespace's handle and the state directory.
func (r *run) sweep(log io.Writer) error {
	var errs []error
	if err := killAll(r.processes, 15*time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, root := range r.cgroupRoots() {
		errs = append(errs, removeCgroupSoon(root))
	}
	removeEmptyCgroups(r.CreatedCgroupDirs)
	// Unmounting the handle frees the namespace, with the bridge, veths,
	// iptables rules and sysctls in it, once no process is left inside.
	errs = append(errs, detach(r.netnsPath()))
	if os.Getenv("ISTIO_AUX_KEEP_CLUSTER_DIR") != "" {
		fmt.Fprintf(log, "real node: kept %s\n", r.stateDir())
	} else if err := os.RemoveAll(r.stateDir()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cgroupRoots are the run's recorded cgroup root and, for a run whose
// record is lost, wherever a cgroup of its name is found.
func (r *run) cgroupRoots() []string {
	roots := map[string]bool{}
	if r.Cgroup != "" {
		roots[r.Cgroup] = true
	}
	mounts, _ := cgroupMounts()
	base, _ := cgroupBase()
	for _, m := range mounts {
		for _, dir := range []string{"/", base} {
			if _, err := os.Stat(filepath.Join(m, dir, r.name)); err == nil {
				roots[filepath.Join(dir, r.name)] = true
			}
		}
	}
	return sortedKeys(roots)
}

// processes are the pids in r's cgroups or network namespace, but never
// this process.
func (r *run) processes() map[int]bool {
	pids := map[int]bool{}
	for _, root := range r.cgroupRoots() {
		for pid := range cgroupPids(root) {
			pids[pid] = true
		}
	}
	if ns, err := inode(r.netnsPath()); err == nil {
		for pid := range netnsPids(ns) {
			pids[pid] = true
		}
	}
	delete(pids, os.Getpid())
	return pids
}

// netnsPids lists the processes in the network namespace with that inode.
func netnsPids(ino uint64) map[int]bool {
	pids := map[int]bool{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if got, err := inode(filepath.Join("/proc", e.Name(), "ns", "net")); err == nil && got == ino {
			pids[pid] = true
		}
	}
	return pids
}

// killAll SIGKILLs whatever list returns until it returns nothing; new
// processes (a shim restarting a container) are caught on the next round.
func killAll(list func() map[int]bool, timeout time.Duration) error {
	var left map[int]bool
	err := poll.Until(context.Background(), timeout, func(context.Context) (bool, error) {
		left = list()
		for pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("processes still alive after SIGKILL: %v", slices.Collect(maps.Keys(left)))
	}
	return nil
}
