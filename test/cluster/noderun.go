package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// netnsDir is where `ip netns` keeps named network namespaces.
const netnsDir = "/run/netns"

// run is one RunInNetns in the parent: its network namespace, cgroup and
// state directory all carry its name, istio-aux-node-<parent pid>, so that a
// later run can find and remove them if this one crashes.
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
	// CreatedNetnsDir is true when this run's `ip netns add` created
	// /run/netns (a mount of its own).
	CreatedNetnsDir bool `json:"createdNetnsDir,omitempty"`
}

func (r *run) netnsPath() string { return filepath.Join(netnsDir, r.name) }
func (r *run) stateDir() string  { return stateDirOf(r.name) }

func stateDirOf(name string) string { return filepath.Join(os.TempDir(), name) }

// newRun creates the state directory first (so that a concurrent Cleanup
// never takes a starting run for a dead one), then the cgroup and the
// network namespace with loopback and the bridge up. The bridge carries the
// node IP before the kubelet starts, as the kubelet needs it.
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
	if _, err := os.Stat(netnsDir); errors.Is(err, fs.ErrNotExist) {
		r.CreatedNetnsDir = true
	}
	if r.CreatedCgroupDirs, err = makeCgroup(r.Cgroup, "harness"); err != nil {
		return r, err
	}
	if err := r.save(); err != nil {
		return r, err
	}
	steps := [][]string{
		{"netns", "add", r.name},
		{"-n", r.name, "link", "set", "lo", "up"},
		{"-n", r.name, "link", "add", bridgeName, "type", "bridge"},
		{"-n", r.name, "addr", "add", NodeIP + "/16", "dev", bridgeName},
		{"-n", r.name, "link", "set", bridgeName, "up"},
		// The bridge plugin will need veth pairs: prove the kernel has them.
		{"-n", r.name, "link", "add", "ia-probe0", "type", "veth", "peer", "name", "ia-probe1"},
		{"-n", r.name, "link", "del", "ia-probe0"},
	}
	for _, args := range steps {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return r, fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return r, nil
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
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return fields[19], nil
}
