package istio

import (
	"fmt"
	"os"
	"path/filepath"

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

// Dir is the cached build: bin/, the istio-discovery chart's files/ and
// values.yaml under istio-discovery/, and envoy_bootstrap.json.
func Dir() string { return filepath.Join(cluster.CacheDir(), "istio-"+Version) }

// BinDir holds pilot-agent and pilot-discovery.
func BinDir() string { return filepath.Join(Dir(), "bin") }

// ChartDir holds the istio-discovery chart's files/ and values.yaml.
func ChartDir() string { return filepath.Join(Dir(), "istio-discovery") }

// BootstrapTemplate is Envoy's bootstrap template, which pilot-agent reads
// at ./var/lib/istio/envoy/envoy_bootstrap_tmpl.json.
func BootstrapTemplate() string { return filepath.Join(Dir(), "envoy_bootstrap.json") }

// Built reports whether hack/build-istio.sh has run: every file the
// package reads is there.
func Built() error {
	for _, f := range []string{
		filepath.Join(BinDir(), "pilot-agent"),
		filepath.Join(BinDir(), "pilot-discovery"),
		filepath.Join(ChartDir(), "values.yaml"),
		filepath.Join(ChartDir(), "files", "injection-template.yaml"),
		BootstrapTemplate(),
	} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("istio %s not built (run hack/build-istio.sh): %w", Version, err)
		}
	}
	return nil
}
