package monitoring

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// root is istio-aux's repository, four directories up.
var root = filepath.Join("..", "..", "..", "..")

const (
	rulesFile = "config/monitoring/300-alerts.yaml"
	runbooks  = "docs/runbooks.md"
	// runbookBase is where every alert's runbook_url points, followed by
	// the anchor GitHub makes of the alert's heading in runbooks.md.
	runbookBase = "https://github.com/istio-aux/istio-aux/blob/main/" + runbooks + "#"
)

// promParser is the PromQL Prometheus parses rules with by default.
var promParser = parser.NewParser(parser.Options{})

// prometheusRule is the part of a monitoring.coreos.com/v1 PrometheusRule
// checked here; its spec is a Prometheus rule file.
type prometheusRule struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec yaml.Node `yaml:"spec"`
}

// loadRules reads the PrometheusRule and parses its spec as Prometheus
// does (rulefmt: unknown fields refused, every expression and template
// parsed). It returns the groups and the spec as a rule file's bytes.
func loadRules(t *testing.T) (prometheusRule, *rulefmt.RuleGroups, []byte) {
	t.Helper()
	var pr prometheusRule
	decodeStrict(t, filepath.Join(root, rulesFile), &pr)
	spec, err := yaml.Marshal(&pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promParser, promslog.NewNopLogger())
	for _, err := range errs {
		t.Errorf("%s: %v", rulesFile, err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return pr, groups, spec
}

// decodeStrict reads the YAML file at path into v, refusing fields v does
// not have (a misspelt key would otherwise be dropped unseen).
func decodeStrict(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestPrometheusRule: the object is the Operator's PrometheusRule in
// istio-aux's namespace; group and alert names are unique; every alert has
// a severity, a summary, a description and a runbook_url to its own
// section of runbooks.md, and every section there is an alert's.
func TestPrometheusRule(t *testing.T) {
	pr, groups, _ := loadRules(t)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("%s is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", rulesFile, pr.APIVersion, pr.Kind)
	}
	if pr.Metadata.Namespace != "istio-aux" || pr.Metadata.Name == "" {
		t.Errorf("metadata: name %q namespace %q, want a name in istio-aux", pr.Metadata.Name, pr.Metadata.Namespace)
	}
	b, err := os.ReadFile(filepath.Join(root, runbooks))
	if err != nil {
		t.Fatal(err)
	}
	var sections []string
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)$`).FindAllStringSubmatch(string(b), -1) {
		sections = append(sections, m[1])
	}
	groupNames, alerts := map[string]bool{}, map[string]bool{}
	for _, g := range groups.Groups {
		if groupNames[g.Name] {
			t.Errorf("group %s twice", g.Name)
		}
		groupNames[g.Name] = true
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a recording rule %s: config/monitoring holds alerts only", g.Name, r.Record)
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("alert %s twice", r.Alert)
			}
			alerts[r.Alert] = true
			checkAlert(t, r, sections)
		}
	}
	if len(alerts) < 5 {
		t.Fatalf("%d alerts: the test lost its grip", len(alerts))
	}
	for _, s := range sections {
		if !alerts[s] {
			t.Errorf("%s has a section %s, which is no alert", runbooks, s)
		}
	}
}

func checkAlert(t *testing.T, r rulefmt.Rule, sections []string) {
	t.Helper()
	if s := r.Labels["severity"]; s != "critical" && s != "warning" {
		t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
	}
	for _, a := range []string{"summary", "description", "runbook_url"} {
		if strings.TrimSpace(r.Annotations[a]) == "" {
			t.Errorf("%s: no %s", r.Alert, a)
		}
	}
	if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
		t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
	}
	if !slices.Contains(sections, r.Alert) {
		t.Errorf("%s: no section \"## %s\" in %s", r.Alert, r.Alert, runbooks)
	}
}
