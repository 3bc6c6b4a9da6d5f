package realnode

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
)

// TestToolVersionsMatch keeps the versions the harness runs equal to what
// hack/tools pins (and hack/build-*.sh therefore build).
func TestToolVersionsMatch(t *testing.T) {
	for _, tc := range []struct{ tool, module, want string }{
		{"coredns", "github.com/coredns/coredns", CoreDNSVersion},
		{"istio", "istio.io/istio", istio.Version},
	} {
		v, err := cluster.ToolsVersion(tc.tool, tc.module)
		if err != nil || v != tc.want {
			t.Errorf("hack/tools/%s requires %s (%v), the harness runs %s", tc.tool, v, err, tc.want)
		}
	}
}

func TestDeepestCgroup(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"hybrid, one deeper hierarchy": {
			in:   "9:name=systemd:/\n4:memory:/process_api/67b3\n1:cpu:/\n0::/\n",
			want: "/process_api/67b3",
		},
		"everything at the root": {in: "4:memory:/\n0::/\n", want: "/"},
		"cgroup v2 only":         {in: "0::/user.slice/session-1.scope\n", want: "/user.slice/session-1.scope"},
		"empty":                  {in: "", want: "/"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := deepestCgroup(tc.in); got != tc.want {
				t.Errorf("deepestCgroup = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMountPoints(t *testing.T) {
	info := `26 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
41 26 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw
50 26 0:40 / /tmp/x/kubelet/pods/a\040b/volumes rw - tmpfs tmpfs rw
`
	cg, err := mountPoints(strings.NewReader(info), func(fstype, _ string) bool { return fstype == "cgroup" || fstype == "cgroup2" })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/unified"}, cg); diff != "" {
		t.Errorf("cgroup mounts (-want +got):\n%s", diff)
	}
	under, _ := mountPoints(strings.NewReader(info), func(_, mp string) bool { return strings.HasPrefix(mp, "/tmp/x/") })
	if diff := cmp.Diff([]string{"/tmp/x/kubelet/pods/a b/volumes"}, under); diff != "" {
		t.Errorf("mounts under /tmp/x (-want +got):\n%s", diff)
	}
}

// The pod network must never give pods a way off the cluster: no default
// route, no masquerading; the bridge keeps the gateway address.
func TestCNIConfigRoutesOnlyTheServiceRange(t *testing.T) {
	b, err := cniConfig("istio-aux-node-1", "10.88.16.0/20", "10.88.16.1", "/tmp/ipam")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "isDefaultGateway") || strings.Contains(string(b), "0.0.0.0/0") {
		t.Errorf("CNI config has a default route: %s", b)
	}
	var conf struct {
		Plugins []struct {
			Type      string `json:"type"`
			Bridge    string `json:"bridge"`
			IsGateway bool   `json:"isGateway"`
			IPMasq    bool   `json:"ipMasq"`
			IPAM      struct {
				Ranges [][]struct{ Subnet, Gateway string } `json:"ranges"`
				Routes []struct{ Dst, GW string }           `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	p := conf.Plugins[0]
	if p.Type != "bridge" || p.Bridge != bridgeName || !p.IsGateway || p.IPMasq ||
		p.IPAM.Ranges[0][0].Subnet != "10.88.16.0/20" || p.IPAM.Ranges[0][0].Gateway != "10.88.16.1" {
		t.Errorf("CNI plugin = %+v", p)
	}
	// The routes: the Service range (kube-proxy), the other nodes' pods and
	// the LAN, each through the node; nothing else.
	var dsts []string
	for _, r := range p.IPAM.Routes {
		if r.GW != "" {
			t.Errorf("route %+v names a gateway: the node's address is the one", r)
		}
		dsts = append(dsts, r.Dst)
	}
	if diff := cmp.Diff([]string{cluster.ServiceCIDR, ClusterCIDR, LANCIDR}, dsts); diff != "" {
		t.Errorf("CNI routes (-want +got):\n%s", diff)
	}
}

// Each of these kubelet settings was a hard failure on this kind of
// machine (FACTS.md, "A real node on this machine").
func TestKubeletConfigKeepsWhatThisMachineNeeds(t *testing.T) {
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(kubeletConfigFor("/run-1", "/tmp/c.sock", "10.87.0.11", "/tmp/c", "/tmp/ca.crt")), &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"failCgroupV1": false, "cgroupDriver": "cgroupfs", "failSwapOn": false, "oomScoreAdj": float64(0),
		"imageGCHighThresholdPercent": float64(100), "readOnlyPort": float64(0),
		"cgroupRoot": "/run-1", "containerRuntimeEndpoint": "unix:///tmp/c.sock", "address": "10.87.0.11",
	}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("%s = %v, want %v", k, cfg[k], v)
		}
	}
	if n, _ := cfg["maxOpenFiles"].(float64); n <= 0 || n > 20000 {
		t.Errorf("maxOpenFiles = %v, want 1..20000 (the hard limit here)", cfg["maxOpenFiles"])
	}
}

func TestStartTimeOfThisProcess(t *testing.T) {
	a, err := startTime(os.Getpid())
	if err != nil || a == "" {
		t.Fatalf("startTime = %q, %v", a, err)
	}
	if b, _ := startTime(os.Getpid()); a != b {
		t.Errorf("start time changed: %s then %s", a, b)
	}
	if _, err := startTime(-1); err == nil {
		t.Error("startTime of no process succeeded")
	}
}
