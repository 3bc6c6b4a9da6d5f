package docs

import (
	"cmp"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/internal/version"
	"github.com/istio-aux/istio-aux/webhook"
)

// Metric is one metric a component registers.
type Metric struct {
	Name string
	// Type is counter, gauge, histogram, summary or untyped: a histogram
	// is scraped as the series Name_bucket, Name_sum and Name_count.
	Type string
	// Labels are the metric's own labels (a scrape adds the target's).
	Labels []string
}

// Registered is every metric the webhook, the bridge, the dispatcher and
// the proxy-quit function register, read from their collectors as each
// component registers them, sorted by name. metrics.md lists these;
// config/monitoring queries them (hack/tools/prometheus checks it).
func Registered() []Metric {
	reg := &collecting{}
	webhook.RegisterMetrics(reg)
	version.Register(reg, "every component")
	metrics.NewBridge(reg)
	metrics.NewDispatch(reg)
	metrics.NewDirect(reg)
	_, _ = proxyquit.NewMetrics(reg)
	var out []Metric
	for _, c := range reg.cs {
		typ := typeOf(c)
		for _, m := range described(c) {
			m.Type = typ
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Metric) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// desc reads a Desc's name and labels from its String, the only place
// client_golang shows them.
var desc = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// described are the metrics c describes, with their labels. Describe, not
// Gather: a vector without a child is not gathered.
func described(c prometheus.Collector) []Metric {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	var out []Metric
	for d := range ch {
		if m := desc.FindStringSubmatch(d.String()); m != nil {
			var labels []string
			if m[2] != "" {
				labels = strings.Split(m[2], ",")
			}
			out = append(out, Metric{Name: m[1], Labels: labels})
		}
	}
	return out
}

// typeOf is c's metric type: a vector's from its Go type (it has no
// child to write), a single metric's from what it writes.
func typeOf(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	m, ok := c.(prometheus.Metric)
	if !ok {
		return "untyped"
	}
	var w dto.Metric
	if m.Write(&w) != nil {
		return "untyped"
	}
	switch {
	case w.Counter != nil:
		return "counter"
	case w.Gauge != nil:
		return "gauge"
	case w.Histogram != nil:
		return "histogram"
	case w.Summary != nil:
		return "summary"
	}
	return "untyped"
}

// collecting is a Registerer that keeps what is registered.
type collecting struct{ cs []prometheus.Collector }

func (c *collecting) Register(col prometheus.Collector) error { c.cs = append(c.cs, col); return nil }
func (c *collecting) MustRegister(cs ...prometheus.Collector) { c.cs = append(c.cs, cs...) }
func (c *collecting) Unregister(prometheus.Collector) bool    { return false }
