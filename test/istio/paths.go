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
// for it, with its own chart and proxy. The module proxy serves Istio only
// as pseudo-versions of some commits; those of the releases below are
// their tags' commits (the latest patches of 1.24, 1.26 and 1.29 are not
// served: docs/compatibility.md).
type Release struct {
	// Name is the release's ("1.24.2"); "" is the harness's default build.
	Name string
	// Version is the istio.io/istio pseudo-version of its commit.
	Version string
}

// The releases the harness can run. Main, the default, is the master
// branch just after 1.30 was cut (what every suite ran before releases
// were); the others are the releases users run whose istiod injects
// classic sidecars by default (1.24, OpenShift Service Mesh 3.0; 1.26, its
// 3.1) and a current one (1.29, whose default is auto).
var (
	Main = Release{Version: Version}
	R124 = Release{Name: "1.24.2", Version: "v0.0.0-20241214032803-7754674f65d3"}
	R126 = Release{Name: "1.26.1", Version: "v0.0.0-20250527174434-2ce3ad897b98"}
	R129 = Release{Name: "1.29.1", Version: "v0.0.0-20260306174214-6991a379e1fc"}
)

// Releases are every Release, the default first.
var Releases = []Release{Main, R124, R126, R129}

// String names the release.
func (r Release) String() string {
	if r.Name == "" {
		return "master after the 1.30 cut"
	}
	return r.Name
}

// ModFile is the module file of hack/tools/istio that builds r.
func (r Release) ModFile() string {
	if r.Name == "" {
		return "go.mod"
	}
	parts := strings.SplitN(r.Name, ".", 3)
	return "v" + parts[0] + "." + parts[1] + ".mod"
}

func (r Release) version() string {
	if r.Version == "" {
		return Version
	}
	return r.Version
}

// Dir is r's cached build: bin/, the istio-discovery chart's files/ and
// values.yaml under istio-discovery/, and envoy_bootstrap.json.
func (r Release) Dir() string { return filepath.Join(cluster.CacheDir(), "istio-"+r.version()) }

// BinDir holds r's pilot-agent and pilot-discovery.
func (r Release) BinDir() string { return filepath.Join(r.Dir(), "bin") }

// ChartDir holds r's istio-discovery chart's files/ and values.yaml.
func (r Release) ChartDir() string { return filepath.Join(r.Dir(), "istio-discovery") }

// BootstrapTemplate is r's Envoy bootstrap template, which pilot-agent
// reads at ./var/lib/istio/envoy/envoy_bootstrap_tmpl.json.
func (r Release) BootstrapTemplate() string { return filepath.Join(r.Dir(), "envoy_bootstrap.json") }

// Built reports whether hack/build-istio.sh has built r: every file the
// package reads is there.
func (r Release) Built() error {
	for _, f := range []string{
		filepath.Join(r.BinDir(), "pilot-agent"),
		filepath.Join(r.BinDir(), "pilot-discovery"),
		filepath.Join(r.ChartDir(), "values.yaml"),
		filepath.Join(r.ChartDir(), "files", "injection-template.yaml"),
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
