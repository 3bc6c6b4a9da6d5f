package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
)

// containerdConfig is containerd 1.6's configuration for the node. Each
// setting below was a hard failure on this kind of machine until set:
//   - restrict_oom_score_adj: the VM lacks CAP_SYS_RESOURCE, so runc cannot
//     lower a container's oom_score_adj below containerd's own; without it
//     every sandbox fails with "can't get final child's PID from pipe: EOF".
//   - runc with SystemdCgroup = false: there is no systemd; the kubelet
//     uses the cgroupfs driver too.
//
// And one that was a rare failure (once in a whole real-node suite on CI's
// machine, stop 48): the task service bounds a shim's answer to a state
// request by io.containerd.timeout.task.state, 2 s by default, and when the
// bound passes it logs the error and answers with a zero state. The CRI
// plugin takes the sandbox's PID from that answer for a new container's
// namespaces, so a pod's first container on a loaded node was sent to
// "/proc/0/ns/ipc" and never started (containerd#9160). Here a slow shim is
// waited for instead: 30 s.
//
// Images come from the node's registry (RegistryAddr), the sandbox image
// too: images.Registry and the registry's own address are mirrored to it
// over plain HTTP.
//
// Everything containerd keeps goes under dir (the opt plugin defaults to
// /opt/containerd, runc's state to /run/containerd/runc), and pod network
// namespaces go under the state dir instead of /run/netns.
const containerdConfig = `version = 2
root = "{{dir}}/root"
state = "{{dir}}/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{{socket}}"

[timeouts]
  "io.containerd.timeout.task.state" = "30s"

[debug]
  level = "warn"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{dir}}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{pause}}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{{runc}}"
        Root = "{{dir}}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{cnibin}}"
    conf_dir = "{{cniconf}}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{{registryName}}"]
    endpoint = ["http://{{registry}}"]
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{{registry}}"]
    endpoint = ["http://{{registry}}"]
`

// cniConfig is a node's pod network: its bridge, which already exists
// (plugIn made it with the gateway address), and host-local addresses
// from the node's range, with routes to the cluster's pods, its Services
// and the LAN through the node, and no default route and no masquerading:
// nothing off the cluster is reachable. isGateway keeps the gateway address
// on the bridge. hairpinMode lets a pod reach itself through a Service
// (kube-proxy masquerades that case).
func cniConfig(name, podCIDR, gateway, ipamDir string) ([]byte, error) {
	routes := []any{}
	for _, dst := range []string{cluster.ServiceCIDR, ClusterCIDR, LANCIDR} {
		routes = append(routes, map[string]any{"dst": dst})
	}
	return json.MarshalIndent(map[string]any{
		"cniVersion": "0.4.0",
		"name":       name,
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      bridgeName,
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  []any{[]any{map[string]any{"subnet": podCIDR, "gateway": gateway}}},
				"routes":  routes,
				"dataDir": ipamDir,
			},
		}},
	}, "", "  ")
}

// cniPlugins puts Debian's CNI plugins in the node's plugin directory
// (links: the package is the machine's), beside what other agents copied
// there.
func (n *Node) cniPlugins() error {
	dir := n.path("cni-bin")
	plugins, err := os.ReadDir(debianCNIDir)
	if err != nil {
		return err
	}
	for _, p := range plugins {
		err := os.Symlink(filepath.Join(debianCNIDir, p.Name()), filepath.Join(dir, p.Name()))
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// startContainerd writes containerd's and the CNI configuration and starts
// containerd.
func (n *Node) startContainerd(ctx context.Context) error {
	dir := n.path("containerd")
	n.socket = filepath.Join(dir, "containerd.sock")
	// The node's pod network at boot, as its network's agent writes it: a
	// plugin chained in by another agent (Istio's) is gone until that agent
	// chains it in again.
	conf, err := cniConfig(insideNetns, n.PodCIDR(), n.gateway(), n.path("cni-ipam"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.path("cni"), "10-istio-aux.conflist"), conf, 0o644); err != nil {
		return err
	}
	if err := n.cniPlugins(); err != nil {
		return err
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return err
	}
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return err
	}
	cfg := strings.NewReplacer("{{dir}}", dir, "{{socket}}", n.socket, "{{pause}}", images.PauseRef,
		"{{runc}}", runc, "{{cnibin}}", cniBinDir, "{{cniconf}}", cniConfDir,
		"{{registryName}}", images.Registry, "{{registry}}", RegistryAddr).Replace(containerdConfig)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	p, err := n.start("containerd", "containerd", "--config", filepath.Join(dir, "config.toml"))
	if err != nil {
		return err
	}
	return p.WaitUp(ctx, 30*time.Second, func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, ctr, "-a", n.socket, "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr version: %w: %s", err, out)
		}
		return nil
	})
}
