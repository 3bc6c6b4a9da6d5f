package istio

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// Version is the istio.io/istio version hack/tools/istio/go.mod requires
// and hack/build-istio.sh caches under; test/realnode's
// TestToolVersionsMatch keeps the two equal.
const Version = "v0.0.0-20260423205519-b01690e6db7d"

// ServiceAccount is what test pods that istiod injects set as
// spec.serviceAccountName, standing in for the ServiceAccount admission
// plugin the harness's API server runs without (see the package doc).
const ServiceAccount = "default"

// Release is an Istio release the harness runs: istio.io/istio at its
// commit, built by hack/build-istio.sh from hack/tools/istio's module file
// for it, with its own charts and proxy. The module proxy serves Istio only
// as pseudo-versions of some commits, and refuses some of the modules those
// commits require: each module file says which commit it builds and what
// it replaces, and why.
type Release struct {
	// Name is the release's ("1.27.9"), also its proxy image's tag; "" is
	// the harness's default build.
	Name string
	// Version is the istio.io/istio pseudo-version of its commit.
	Version string
	// Note says how the build differs from the release named, if it does.
	Note string
}

// The releases the harness can run. Main, the default, is the master
// branch just after 1.30 was cut (what every suite ran before releases
// were served). The others are the releases OpenShift Service Mesh 3.x and
// upstream support (1.24: OSSM 3.0, 1.26: 3.1, 1.27: 3.2, 1.28: 3.3, 1.30:
// 3.4; 1.31), each at the newest patch the module proxy serves. 1.29 is out
// of support (2026-10-12) and no longer run.
var (
	Main = Release{Version: Version}
	R124 = Release{Name: "1.24.2", Version: "v0.0.0-20241214032803-7754674f65d3"}
	R126 = Release{Name: "1.26.1", Version: "v0.0.0-20250527174434-2ce3ad897b98"}
	R127 = Release{Name: "1.27.9", Version: "v0.0.0-20260403063052-b9159ca3e5d5",
		Note: "istio.io/client-go v1.27.3 for the refused v1.27.8 pseudo-version (the same Go code)"}
	R128 = Release{Name: "1.28.3", Version: "v0.0.0-20260114100434-4c1f845d839e"}
	R130 = Release{Name: "1.30-9739e10e", Version: "v0.0.0-20260826214018-9739e10eb9d7",
		Note: "the release-1.30 branch after 1.30.3, with 1.30.4's fixes: every 1.30 tag's commit is refused"}
	R131 = Release{Name: "1.31.0", Version: "v0.0.0-20260827124520-eed52ebb66ad"}
)

// Releases are every Release, the default first.
var Releases = []Release{Main, R124, R126, R127, R128, R130, R131}

// String names the release.
func (r Release) String() string {
	if r.Name == "" {
		return "master after the 1.30 cut"
	}
	return r.Name
}

// ProxyImage is the proxy image of r's pods (its own pilot-agent): each
// release's is tagged apart, so that two revisions of two releases can run
// side by side (a canary upgrade), each pod with the agent of the istiod
// that injected it.
func (r Release) ProxyImage() string {
	if r.Name == "" {
		return ProxyImage
	}
	return strings.TrimSuffix(ProxyImage, ":dev") + ":" + r.Name
}

// ModFile is the module file of hack/tools/istio that builds r.
func (r Release) ModFile() string {
	if r.Name == "" {
		return "go.mod"
	}
	parts := strings.SplitN(r.Name, ".", 3)
	minor, _, _ := strings.Cut(parts[1], "-")
	return "v" + parts[0] + "." + minor + ".mod"
}

func (r Release) version() string {
	if r.Version == "" {
		return Version
	}
	return r.Version
}

// Dir is r's cached build: bin/ (pilot-agent, pilot-discovery, install-cni,
// istio-cni), the istio-discovery and istio-cni charts, and
// envoy_bootstrap.json.
func (r Release) Dir() string { return filepath.Join(cluster.CacheDir(), "istio-"+r.version()) }

// BinDir holds r's pilot-agent and pilot-discovery.
func (r Release) BinDir() string { return filepath.Join(r.Dir(), "bin") }

// ChartDir holds r's istio-discovery chart (istiod's).
func (r Release) ChartDir() string { return filepath.Join(r.Dir(), "istio-discovery") }

// CNIChartDir holds r's istio-cni chart (the CNI node agent's).
func (r Release) CNIChartDir() string { return filepath.Join(r.Dir(), "istio-cni") }

// BootstrapTemplate is r's Envoy bootstrap template, which pilot-agent
// reads at ./var/lib/istio/envoy/envoy_bootstrap_tmpl.json.
func (r Release) BootstrapTemplate() string { return filepath.Join(r.Dir(), "envoy_bootstrap.json") }

// Built reports whether hack/build-istio.sh has built r: every file the
// package reads is there.
func (r Release) Built() error {
	for _, f := range []string{
		filepath.Join(r.BinDir(), "pilot-agent"),
		filepath.Join(r.BinDir(), "pilot-discovery"),
		filepath.Join(r.BinDir(), "install-cni"),
		filepath.Join(r.BinDir(), "istio-cni"),
		filepath.Join(r.ChartDir(), "Chart.yaml"),
		filepath.Join(r.ChartDir(), "files", "injection-template.yaml"),
		filepath.Join(r.CNIChartDir(), "Chart.yaml"),
		r.BootstrapTemplate(),
	} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("istio %s (%s) not built (run hack/build-istio.sh %s): %w", r, r.version(), r.ModFile(), err)
		}
	}
	return nil
}

// Dir, BinDir, ChartDir, BootstrapTemplate and Built are Main's.
func Dir() string               { return Main.Dir() }
func BinDir() string            { return Main.BinDir() }
func ChartDir() string          { return Main.ChartDir() }
func BootstrapTemplate() string { return Main.BootstrapTemplate() }
func Built() error              { return Main.Built() }
