// Package docs holds the project's documentation; its test keeps
// metrics.md true to the code.
package docs

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/webhook"
)

// TestMetricsAreDocumented: every metric a component registers is in
// metrics.md, and every metric there is registered.
func TestMetricsAreDocumented(t *testing.T) {
	// The webhook registers on the default registry knative's sharedmain
	// serves; its names are constants (webhook/metrics.go).
	registered := []string{webhook.MetricAdmissions, webhook.MetricAdmissionDuration}
	// Describe, not Gather: a vector without a child is not gathered.
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		for _, c := range collectors() {
			c.Describe(ch)
		}
		close(ch)
	}()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			registered = append(registered, m[1])
		}
	}
	doc, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(istio_aux_[a-z_]+)`").FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	if len(registered) < 15 || len(documented) < 15 {
		t.Fatalf("found %d registered and %d documented metrics: the test lost its grip", len(registered), len(documented))
	}
	for _, n := range registered {
		if !slices.Contains(documented, n) {
			t.Errorf("%s is registered but not in metrics.md", n)
		}
	}
	for _, n := range documented {
		if !slices.Contains(registered, n) {
			t.Errorf("metrics.md lists %s, which no component registers", n)
		}
	}
}

// collectors are every metric of the bridge, the dispatcher and the
// function, registered on a registry of their own.
func collectors() []prometheus.Collector {
	var out []prometheus.Collector
	reg := &collecting{}
	metrics.NewBridge(reg)
	metrics.NewDispatch(reg)
	_, _ = proxyquit.NewMetrics(reg)
	out = append(out, reg.cs...)
	return out
}

// collecting is a Registerer that keeps what is registered.
type collecting struct{ cs []prometheus.Collector }

func (c *collecting) Register(col prometheus.Collector) error { c.cs = append(c.cs, col); return nil }
func (c *collecting) MustRegister(cs ...prometheus.Collector) { c.cs = append(c.cs, cs...) }
func (c *collecting) Unregister(prometheus.Collector) bool    { return false }
