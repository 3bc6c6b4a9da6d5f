package cluster

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
)

// node is the real node's state: containerd and the kubelet run as the
// cluster's processes (logs prefixed "containerd|" and "kubelet|"), all of
// their files are under the cluster dir, and the pods under the run's
// cgroup.
type node struct {
	// cgroup is the kubelet's cgroupRoot (the run's cgroup): the pods go to
	// cgroup/kubepods, containerd and its shims sit in cgroup/harness.
	cgroup string
	socket string // containerd's
	ctr    string // the ctr binary
}

// startNode makes the control plane a whole single-node cluster: the
// registry, containerd and the kubelet, kube-proxy, persistent volumes,
// then the cluster DNS as a pod (the scheduler places it, the node pulls its
// image). Every step waits until the part it started works.
func (c *Cluster) startNode(ctx context.Context) error {
	if insideNetns == "" {
		return fmt.Errorf("a real node runs only inside RunInNetns's network namespace (%s)", nodeUnavailable)
	}
	if err := nodeAlone(); err != nil {
		return err
	}
	c.node = &node{cgroup: nodeCgroup}
	var took []string
	for _, step := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"registry", c.startRegistry},
		{"containerd", c.startContainerd},
		{"kubelet Ready", c.startKubelet},
		{"kube-proxy", c.startKubeProxy},
		{"volumes", c.startVolumes},
		{"cluster DNS", c.startClusterDNS},
	} {
		start := time.Now()
		if err := step.run(ctx); err != nil {
			return fmt.Errorf("real node, %s: %w", step.name, err)
		}
		took = append(took, fmt.Sprintf("%s %s", step.name, time.Since(start).Round(time.Millisecond)))
	}
	fmt.Fprintf(logFor(c.opts.Log), "harness| real node up: %s\n", strings.Join(took, ", "))
	return nil
}

// NodeCgroup is the real node's cgroup root, the same path below every
// cgroup hierarchy's mount point: the pods are in NodeCgroup()/kubepods,
// containerd, its shims and the harness in NodeCgroup()/harness.
func (c *Cluster) NodeCgroup() string {
	if c.node == nil {
		return ""
	}
	return c.node.cgroup
}

// nodeAlone fails when another real node already runs in this namespace:
// they would share the kubelet's ports and the cgroup.
func nodeAlone() error {
	for _, p := range cgroupPidsNamed(nodeCgroup, "kubelet") {
		return fmt.Errorf("a kubelet (pid %d) already runs in this namespace: one real node at a time", p)
	}
	return nil
}

// killPods kills the real node's pods, which the kubelet leaves running
// when it stops. The kubelet must be gone, or it would start them again.
func (c *Cluster) killPods() error {
	if c.node == nil {
		return nil
	}
	pods := filepath.Join(c.node.cgroup, "kubepods")
	return killAll(func() map[int]bool { return cgroupPids(pods) }, 15*time.Second)
}

// stopNode runs after the cluster's processes stopped. containerd's shims
// outlive containerd: kill them (and any pod still there), remove the
// pods' cgroups so the next node starts clean, and unmount what the kubelet
// and containerd mounted under the cluster dir (the kubelet's root dir on
// itself, volumes, rootfs overlays, pod network namespaces), which would
// keep the dir from being removed.
func (c *Cluster) stopNode() error {
	if c.node == nil {
		return nil
	}
	pods := filepath.Join(c.node.cgroup, "kubepods")
	err := killAll(func() map[int]bool {
		pids := cgroupPids(pods)
		for _, p := range cgroupPidsNamed(filepath.Join(c.node.cgroup, "harness"), "containerd-shim-runc-v2") {
			pids[p] = true
		}
		return pids
	}, 15*time.Second)
	errs := []error{err}
	errs = append(errs, Poll(context.Background(), 100*time.Millisecond, 5*time.Second, func(context.Context) (bool, error) {
		return removeCgroup(pods) == nil, nil
	}))
	errs = append(errs, unmountUnder(c.dir))
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
