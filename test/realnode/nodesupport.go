package realnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// debianCNIDir is where Debian's containernetworking-plugins installs the
// plugins.
const debianCNIDir = "/usr/lib/cni"

// nodeTools are the programs the real node runs from PATH; all come from
// Debian packages that hack/node-deps.sh installs.
var nodeTools = []string{"nsenter", "unshare", "ip", "iptables", "containerd", "containerd-shim-runc-v2", "ctr", "runc"}

// EnvNoNode, set to a reason, keeps RunInNetns from starting a real node
// (make run's ISTIO_AUX_NODE=0).
const EnvNoNode = "ISTIO_AUX_NO_NODE"

// nodeSupport says why this machine cannot host a real node, or "".
func nodeSupport() string {
	if why := os.Getenv(EnvNoNode); why != "" {
		return "turned off: " + why
	}
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Sprintf("not root (uid %d): network namespaces, mounts and cgroups need root", uid)
	}
	var missing []string
	for _, t := range nodeTools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(debianCNIDir, p)); err != nil {
			missing = append(missing, filepath.Join(debianCNIDir, p))
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("%s missing (run hack/node-deps.sh)", strings.Join(missing, ", "))
	}
	// Every cluster's etcd and kubectl are the newest's (hack/build-k8s.sh);
	// the rest is the version's own, which the cluster and each node check
	// at start for the version their shape runs: a cell of an older version
	// needs no newer control plane or kubelet built
	// (`K8S_COMMANDS="etcd kubectl" hack/build-k8s.sh`, then
	// `hack/build-k8s.sh VERSION`).
	for _, b := range []string{"etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(cluster.K8sBinDir(), b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("%s missing in %s (run hack/build-k8s.sh, or with K8S_COMMANDS=\"etcd kubectl\" for a cell of an older version)", strings.Join(missing, ", "), cluster.K8sBinDir())
	}
	for bin, script := range map[string]string{
		filepath.Join(ToolsBinDir(), "crane"): "hack/build-tools.sh",
		CoreDNSBin():                          "hack/build-coredns.sh",
	} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Sprintf("%s missing (run %s)", bin, script)
		}
	}
	fss, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return err.Error()
	}
	for _, fs := range []string{"overlay", "tmpfs", "cgroup"} {
		if !strings.Contains(string(fss), "\t"+fs+"\n") {
			return fmt.Sprintf("the kernel lacks the %s file system", fs)
		}
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return "the kernel lacks network namespaces: " + err.Error()
	}
	// The kubelet's cgroupfs driver on cgroup v1 needs these hierarchies; a
	// pure cgroup v2 machine would need another cgroup setup here.
	for _, h := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, "cgroup.procs")); err != nil {
			return fmt.Sprintf("cgroup v1 hierarchy %q not mounted at /sys/fs/cgroup/%s (the harness supports cgroup v1 and hybrid layouts only)", h, h)
		}
	}
	return ""
}
