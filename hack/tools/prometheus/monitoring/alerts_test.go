package monitoring

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// A file of testdata/ is in the format of promtool's rule unit tests,
// without rule_files (the rules are config/monitoring's) and with one
// difference: exp_annotations need only name the annotations a case checks.
type testFile struct {
	EvaluationInterval model.Duration `yaml:"evaluation_interval"`
	Tests              []testGroup    `yaml:"tests"`
}

type testGroup struct {
	Name           string         `yaml:"name"`
	Interval       model.Duration `yaml:"interval"`
	InputSeries    []inputSeries  `yaml:"input_series"`
	AlertRuleTests []alertTest    `yaml:"alert_rule_test"`
}

type inputSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

type alertTest struct {
	EvalTime  model.Duration `yaml:"eval_time"`
	Alertname string         `yaml:"alertname"`
	ExpAlerts []expAlert     `yaml:"exp_alerts"`
}

type expAlert struct {
	ExpLabels      map[string]string `yaml:"exp_labels"`
	ExpAnnotations map[string]string `yaml:"exp_annotations"`
}

// TestAlerts evaluates the rules on every case of testdata/ as Prometheus's
// rule manager does, one evaluation_interval at a time, and compares the
// alerts firing at each eval_time. Every alert must be seen both firing and
// silent somewhere.
func TestAlerts(t *testing.T) {
	_, groups, spec := loadRules(t)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	cases, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("no cases in testdata/ (%v)", err)
	}
	fired, silent := map[string]bool{}, map[string]bool{}
	for _, c := range cases {
		tf := readCases(t, c)
		for _, g := range tf.Tests {
			t.Run(filepath.Base(c)+"/"+g.Name, func(t *testing.T) {
				runGroup(t, file, time.Duration(tf.EvaluationInterval), g)
			})
			for _, at := range g.AlertRuleTests {
				if len(at.ExpAlerts) > 0 {
					fired[at.Alertname] = true
				} else {
					silent[at.Alertname] = true
				}
			}
		}
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if !fired[r.Alert] || !silent[r.Alert] {
				t.Errorf("%s: no case where it fires (%v) and one where it stays silent (%v)", r.Alert, fired[r.Alert], silent[r.Alert])
			}
		}
	}
}

func readCases(t *testing.T, path string) testFile {
	t.Helper()
	var tf testFile
	decodeStrict(t, path, &tf)
	if tf.EvaluationInterval == 0 {
		tf.EvaluationInterval = model.Duration(time.Minute)
	}
	return tf
}

// runGroup loads one case's series and rules and evaluates them up to its
// last eval_time.
func runGroup(t *testing.T, rulesFile string, every time.Duration, g testGroup) {
	if g.Interval == 0 {
		g.Interval = model.Duration(every)
	}
	var load strings.Builder
	fmt.Fprintf(&load, "load %s\n", g.Interval)
	for _, s := range g.InputSeries {
		fmt.Fprintf(&load, "  %s %s\n", s.Series, s.Values)
	}
	suite, err := promqltest.NewLazyLoader(load.String(), promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true})
	if err != nil {
		t.Fatalf("input_series: %v", err)
	}
	defer func() { _ = suite.Close() }()
	mgr := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       promslog.NewNopLogger(),
	})
	loaded, errs := mgr.LoadGroups(every, labels.EmptyLabels(), "", nil, false, rulesFile)
	if len(errs) > 0 {
		t.Fatalf("loading the rules: %v", errs)
	}
	byTime := map[time.Duration][]alertTest{}
	var last time.Duration
	for _, at := range g.AlertRuleTests {
		d := time.Duration(at.EvalTime)
		if d%every != 0 {
			t.Fatalf("eval_time %s is not a multiple of the evaluation interval %s", at.EvalTime, every)
		}
		byTime[d] = append(byTime[d], at)
		last = max(last, d)
	}
	// No rule here is a recording rule, so the groups' order does not matter.
	for d := time.Duration(0); d <= last; d += every {
		ts := time.Unix(0, 0).UTC().Add(d)
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				t.Fatal(err)
			}
			for _, grp := range loaded {
				grp.Eval(suite.Context(), ts)
			}
		})
		for _, at := range byTime[d] {
			checkFiring(t, loaded, at)
		}
	}
}

// checkFiring compares the alerts of at.Alertname firing now with
// at.ExpAlerts: the same label sets (alertname implied), and the expected
// annotations among theirs.
func checkFiring(t *testing.T, loaded map[string]*rules.Group, at alertTest) {
	t.Helper()
	var got []*rules.Alert
	known := false
	for _, grp := range loaded {
		for _, r := range grp.Rules() {
			ar, ok := r.(*rules.AlertingRule)
			if !ok || ar.Name() != at.Alertname {
				continue
			}
			known = true
			for _, a := range ar.ActiveAlerts() {
				if a.State == rules.StateFiring {
					got = append(got, a)
				}
			}
		}
	}
	if !known {
		t.Fatalf("no alert %s in the rules", at.Alertname)
	}
	unmatched := slices.Clone(got)
	for _, exp := range at.ExpAlerts {
		want := maps.Clone(exp.ExpLabels)
		if want == nil {
			want = map[string]string{}
		}
		want["alertname"] = at.Alertname
		i := slices.IndexFunc(unmatched, func(a *rules.Alert) bool { return labels.Equal(a.Labels, labels.FromMap(want)) })
		if i < 0 {
			t.Errorf("at %s: %s is not firing; firing: %s", at.EvalTime, labels.FromMap(want), describe(got))
			continue
		}
		a := unmatched[i]
		unmatched = slices.Delete(unmatched, i, i+1)
		for k, v := range exp.ExpAnnotations {
			if g := a.Annotations.Get(k); g != v {
				t.Errorf("at %s: %s annotation %s:\n got %q\nwant %q", at.EvalTime, a.Labels, k, g, v)
			}
		}
	}
	if len(unmatched) > 0 {
		t.Errorf("at %s: %s also fires: %s", at.EvalTime, at.Alertname, describe(unmatched))
	}
}

func describe(as []*rules.Alert) string {
	if len(as) == 0 {
		return "none"
	}
	var s []string
	for _, a := range as {
		s = append(s, fmt.Sprintf("%s (value %g)", a.Labels, a.Value))
	}
	return strings.Join(s, ", ")
}
