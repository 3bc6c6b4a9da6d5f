package monitoring

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	dashboardFile = "config/monitoring/dashboards/istio-aux.json"
	kustomization = "config/monitoring/kustomization.yaml"
)

// dashboard is the part of Grafana's dashboard JSON model checked here.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	// A collapsed row holds its panels.
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// grafanaVariables are the variables a query may use, with the value the
// check parses in their place.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// queries are the dashboard's PromQL queries by panel title, Grafana's
// variables replaced.
func (d dashboard) queries() map[string][]string {
	out := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[p.Title] = append(out[p.Title], grafanaVariables.Replace(tg.Expr))
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// TestDashboard: the dashboard has a uid and a title, panel ids are
// unique, every panel but a row queries, through the data source variable
// (so it works with any Prometheus data source), and uses no variable the
// check does not know.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed for Grafana to keep it one dashboard", d.UID, d.Title)
	}
	hasVar := false
	for _, v := range d.Templating.List {
		hasVar = hasVar || (v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus")
	}
	if !hasVar {
		t.Error("no Prometheus data source variable named datasource")
	}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, ds := range append([]*datasource{p.Datasource}, targetSources(p)...) {
				if ds == nil || ds.UID != "${datasource}" {
					t.Errorf("panel %q: data source %+v, want uid ${datasource}", p.Title, ds)
				}
			}
		}
	}
	walk(d.Panels)
	for title, qs := range d.queries() {
		for _, q := range qs {
			if strings.Contains(q, "$") {
				t.Errorf("panel %q: a variable the check does not know in %q", title, q)
			}
		}
	}
}

func targetSources(p panel) []*datasource {
	var out []*datasource
	for _, tg := range p.Targets {
		out = append(out, tg.Datasource)
	}
	return out
}

// TestKustomization: `kubectl apply -k config/monitoring/` applies the
// rules and generates the dashboard's ConfigMap from the JSON checked here,
// labelled for Grafana's sidecar.
func TestKustomization(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, kustomization))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources          []string `yaml:"resources"`
		ConfigMapGenerator []struct {
			Files   []string `yaml:"files"`
			Options struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"options"`
		} `yaml:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(kustomization)
	if len(k.Resources) != 1 || filepath.Join(dir, k.Resources[0]) != rulesFile {
		t.Errorf("resources %v, want the rules %s", k.Resources, rulesFile)
	}
	if len(k.ConfigMapGenerator) != 1 || len(k.ConfigMapGenerator[0].Files) != 1 ||
		filepath.Join(dir, k.ConfigMapGenerator[0].Files[0]) != dashboardFile ||
		k.ConfigMapGenerator[0].Options.Labels["grafana_dashboard"] != "1" {
		t.Errorf("configMapGenerator %+v, want %s labelled grafana_dashboard: \"1\"", k.ConfigMapGenerator, dashboardFile)
	}
}
