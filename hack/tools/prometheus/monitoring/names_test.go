package monitoring

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// series is what a query may select: a metric's name and the labels its
// series carry besides the scrape target's.
type series map[string][]string

// external are the series config/monitoring reads from outside istio-aux:
// the API server's admission-webhook metrics (k8s.io/apiserver
// pkg/admission/metrics, Kubernetes 1.36) and Prometheus's own up.
var external = series{
	"apiserver_admission_webhook_request_total":                     {"name", "type", "operation", "code", "rejected"},
	"apiserver_admission_webhook_fail_open_count":                   {"name", "type"},
	"apiserver_admission_webhook_rejection_count":                   {"name", "type", "operation", "error_type", "rejection_code"},
	"apiserver_admission_webhook_admission_duration_seconds_bucket": {"name", "type", "operation", "rejected", "le"},
	"up": nil,
}

// promised are istio-aux metrics the rules use before a component registers
// them, each with why. A promise kept must leave this list (the test says
// so), so that a metric renamed on the way cannot hide here.
var promised = map[string]struct {
	labels []string
	why    string
}{}

// targetLabels are those a scrape adds to every series (the Prometheus
// Operator's, for a Service or a Pod target).
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// registered runs istio-aux's docs/cmd/metrics, in istio-aux's own module,
// and returns the series of every metric its components register.
func registered(t *testing.T) series {
	t.Helper()
	cmd := exec.Command("go", "run", "./docs/cmd/metrics")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./docs/cmd/metrics in istio-aux's module: %v", err)
	}
	s := series{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("docs/cmd/metrics printed %q, want name type labels", line)
		}
		name, typ, ls := f[0], f[1], strings.Split(f[2], ",")
		if f[2] == "-" {
			ls = nil
		}
		switch typ {
		case "histogram":
			s[name+"_bucket"] = append(slices.Clone(ls), "le")
			s[name+"_sum"], s[name+"_count"] = ls, ls
		case "summary":
			s[name] = append(slices.Clone(ls), "quantile")
			s[name+"_sum"], s[name+"_count"] = ls, ls
		default:
			s[name] = ls
		}
	}
	if len(s) < 15 {
		t.Fatalf("docs/cmd/metrics listed %d series: the test lost its grip", len(s))
	}
	return s
}

// TestNamesAreRegistered: every series the rules and the dashboard query is
// one istio-aux's components register (read from them, not from a list),
// one of the named external ones, or a promised one; and every label a
// query matches or groups by is one such series has.
func TestNamesAreRegistered(t *testing.T) {
	known := registered(t)
	for name, p := range promised {
		if _, ok := known[name]; ok {
			t.Errorf("%s is registered now: remove it from promised", name)
		}
		t.Logf("%s is not registered yet (%s)", name, p.why)
		known[name] = p.labels
	}
	for name, ls := range external {
		known[name] = ls
	}
	queries := map[string][]string{}
	_, groups, _ := loadRules(t)
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			queries["alert "+r.Alert] = []string{r.Expr}
		}
	}
	for title, qs := range loadDashboard(t).queries() {
		queries["panel "+title] = qs
	}
	if len(queries) < 20 {
		t.Fatalf("%d rules and panels: the test lost its grip", len(queries))
	}
	for where, qs := range queries {
		for _, q := range qs {
			expr, err := promParser.ParseExpr(q)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			checkNames(t, where, expr, known)
		}
	}
}

// checkNames checks the selectors and groupings of one query.
func checkNames(t *testing.T, where string, expr parser.Expr, known series) {
	t.Helper()
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			labelsOf, ok := selected(n, known)
			if !ok {
				t.Errorf("%s: %s is no series istio-aux registers nor a named external one", where, n)
				return nil
			}
			for _, m := range n.LabelMatchers {
				if m.Name != labels.MetricName && !slices.Contains(labelsOf, m.Name) {
					t.Errorf("%s: %s has no label %s", where, n.Name, m.Name)
				}
			}
		case *parser.AggregateExpr:
			// The labels of the series aggregated, wherever they come from.
			var have []string
			parser.Inspect(n.Expr, func(inner parser.Node, _ []parser.Node) error {
				if vs, ok := inner.(*parser.VectorSelector); ok {
					ls, _ := selected(vs, known)
					have = append(have, ls...)
				}
				return nil
			})
			for _, l := range n.Grouping {
				if !slices.Contains(have, l) {
					t.Errorf("%s: %s groups by %s, which none of its series has", where, n.Op, l)
				}
			}
		}
		return nil
	})
}

// selected is the labels of the series a selector names (its own and the
// target's), and whether it names a known one.
func selected(vs *parser.VectorSelector, known series) ([]string, bool) {
	ls, ok := known[vs.Name]
	if !ok {
		return nil, false
	}
	return append(slices.Clone(ls), targetLabels...), true
}
