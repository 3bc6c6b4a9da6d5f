package realnode

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// A run's cgroup root exists, under the same path, in every cgroup
// hierarchy mounted here: the kubelet takes one cgroupRoot for all of them
// (cgroup v1, cgroupfs driver), and runc also creates pod cgroups in the
// named systemd and the unified (hybrid) hierarchies. Everything a run
// starts sits below it: the harness (root/harness, joined by the child)
// and each node (root/<node>: its daemons and shims in system, its pods in
// kubepods). Killing what is in it and removing it is the cleanup.

// cgroupMounts returns the mount point of every cgroup hierarchy.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountPoints(f, func(fstype, _ string) bool { return fstype == "cgroup" || fstype == "cgroup2" })
}

// mountPoints reads a mountinfo file and returns the (unescaped) mount
// points of the mounts that keep accepts, in mount order.
func mountPoints(mountinfo io.Reader, keep func(fstype, mountPoint string) bool) ([]string, error) {
	var out []string
	s := bufio.NewScanner(mountinfo)
	for s.Scan() {
		// "36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer":
		// the mount point is field 5, the type follows the "-" separator.
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for i := 5; i < len(fields)-1; i++ {
			if fields[i] == "-" {
				if keep(fields[i+1], mp) {
					out = append(out, mp)
				}
				break
			}
		}
	}
	return out, s.Err()
}

// cgroupBase is where this process sits in its deepest hierarchy. The run's
// cgroup goes below it, so that a machine that accounts this process in a
// cgroup of its own (as a sandbox's memory cgroup here) still accounts
// the node and its pods, and the run never escapes to the root.
func cgroupBase() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	return deepestCgroup(string(b)), nil
}

// deepestCgroup is the longest path in a /proc/<pid>/cgroup file.
func deepestCgroup(procCgroup string) string {
	base := "/"
	for line := range strings.Lines(procCgroup) {
		// "4:memory:/process_api/67b3...": the path is after the second colon.
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) == 3 && len(parts[2]) > len(base) {
			base = parts[2]
		}
	}
	return base
}

// makeCgroup creates root and root/sub in every hierarchy and returns the
// ancestors of root it had to create (relative paths, deepest last). cpuset
// directories get their parent's cpus and mems: cgroup v1 leaves them empty
// and an empty cpuset takes no process.
func makeCgroup(root string, sub ...string) ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	created := map[string]bool{}
	dirs := []string{root}
	for _, s := range sub {
		dirs = append(dirs, filepath.Join(root, s))
	}
	for _, m := range mounts {
		for _, d := range dirs {
			rel := ""
			for _, part := range strings.Split(strings.Trim(d, "/"), "/") {
				rel += "/" + part
				path := filepath.Join(m, rel)
				err := os.Mkdir(path, 0o755)
				if errors.Is(err, fs.ErrExist) {
					continue
				}
				if err != nil {
					return sortedKeys(created), fmt.Errorf("creating cgroup %s: %w", path, err)
				}
				if len(rel) < len(root) {
					created[rel] = true
				}
				if err := inheritCpuset(path); err != nil {
					return sortedKeys(created), err
				}
			}
		}
	}
	return sortedKeys(created), nil
}

func inheritCpuset(path string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		if _, err := os.Stat(filepath.Join(path, f)); err != nil {
			return nil // not the cpuset hierarchy
		}
		b, err := os.ReadFile(filepath.Join(filepath.Dir(path), f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(path, f), b, 0o644); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(path, f), err)
		}
	}
	return nil
}

// joinCgroup moves this process (every thread) into path in every hierarchy.
func joinCgroup(path string) error { return joinCgroupPid(os.Getpid(), path) }

// joinCgroupPid moves process pid (every thread) into path in every
// hierarchy.
func joinCgroupPid(p int, path string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	pid := []byte(strconv.Itoa(p))
	for _, m := range mounts {
		if err := os.WriteFile(filepath.Join(m, path, "cgroup.procs"), pid, 0o644); err != nil {
			return fmt.Errorf("joining cgroup %s: %w", filepath.Join(m, path), err)
		}
	}
	return nil
}

// cgroupPids lists the processes anywhere below root, in any hierarchy.
func cgroupPids(root string) map[int]bool {
	pids := map[int]bool{}
	mounts, _ := cgroupMounts()
	for _, m := range mounts {
		_ = filepath.WalkDir(filepath.Join(m, root), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids[pid] = true
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroup removes root and everything below it, deepest first, in
// every hierarchy; a missing root is not an error.
func removeCgroup(root string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(m, root), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeEmptyCgroups removes the given directories (relative, deepest
// last) in every hierarchy where they are empty; one still in use by
// someone else stays.
func removeEmptyCgroups(dirs []string) {
	mounts, _ := cgroupMounts()
	for _, m := range mounts {
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = syscall.Rmdir(filepath.Join(m, dirs[i]))
		}
	}
}

// sortedKeys are m's keys, shortest (an ancestor) first.
func sortedKeys(m map[string]bool) []string {
	return slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
}
