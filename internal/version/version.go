// Package version is the build of the running binary, as the Go toolchain
// stamped it (ko and go build stamp the module's version and the git
// commit they built), and the build-info metric every component serves.
package version

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Build is what a binary knows of its own build.
type Build struct {
	// Version is the main module's version: a release tag when installed
	// with go install at one, "(devel)" when built from a checkout.
	Version string `json:"version"`
	// Revision is the git commit built ("" when the build had no VCS
	// information), with "-dirty" when the checkout had changes.
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"goVersion"`
}

// release is the version make release stamps into what it builds
// (-ldflags -X github.com/istio-aux/istio-aux/internal/version.release=vX.Y.Z):
// a release is made from any commit, tagged or not.
var release string

// Current is the running binary's build.
func Current() Build {
	b := Build{Version: "(devel)", GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	switch {
	case release != "":
		b.Version = release
	case info.Main.Version != "":
		b.Version = info.Main.Version
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "" {
		b.Revision += "-dirty"
	}
	return b
}

// MetricBuildInfo is the build-info metric's name.
const MetricBuildInfo = "istio_aux_build_info"

// Register registers on reg the build-info metric of component: a gauge
// at 1 whose labels say the build (Prometheus's convention for
// build_info), so that a scrape, or kubectl istio-aux version, tells which
// build each replica runs.
func Register(reg prometheus.Registerer, component string) {
	b := Current()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricBuildInfo,
		Help: "The component's build: always 1, its labels the main module's version, the git revision and the Go version.",
	}, []string{"component", "version", "revision", "go_version"})
	g.WithLabelValues(component, b.Version, b.Revision, b.GoVersion).Set(1)
	reg.MustRegister(g)
}
