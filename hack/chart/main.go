// Command chart writes charts/istio-aux, istio-aux's Helm chart, from
// config/: every manifest of every install shape becomes a template of its
// own, included when the values choose its shape, so that the chart and
// `ko apply -f config/` are one source. Nothing in the chart is written by
// hand; chart_test.go holds the checked-in chart to what this writes, and
// its renderings to config/'s manifests, shape by shape.
//
//	go run ./hack/chart            # rewrite charts/istio-aux
//	go run ./hack/chart -release v0.1.0 -package DIR istio-aux.yaml istio-aux-standalone.yaml
//	                               # the release's chart archive (make release)
//
// What the values choose (values.yaml documents each):
//   - standalone: config/standalone/ (the all-in-ones, embedded NATS)
//     instead of config/ and a NATS;
//   - nats.servers: 3 (config/nats/, the default), 1 (config/nats-single/)
//     or 0 (your own NATS: set configIstioAux's nats-url yourself);
//   - dispatch: config/dispatch/'s dispatchers beside the bridges;
//   - openshift: no pinned user, group or fsGroup (as hack/release/unpin
//     writes istio-aux-openshift.yaml);
//   - monitoring: config/monitoring/'s PrometheusRule and Grafana
//     dashboard;
//   - images: each image's reference (ko:// paths here, which `make
//     release` replaces with the release's digests).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/istio-aux/istio-aux/pkg/versions"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	out := flag.String("out", "charts/istio-aux", "where to write the chart")
	release := flag.String("release", "", "a release's version: package its chart, with the images the manifests given as arguments pin")
	pkg := flag.String("package", ".", "with -release: the directory the chart archive is written to")
	push := flag.String("push", "", "with -release: also push the archive to this OCI repository (oci://HOST/PATH), as helm push does, and print its reference by digest")
	flag.Parse()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
	files, err := Generate(*root)
	if err != nil {
		fail(err)
	}
	if *release == "" {
		if err := Write(files, *out); err != nil {
			fail(err)
		}
		return
	}
	var manifests [][]byte
	for _, f := range flag.Args() {
		b, err := os.ReadFile(f)
		if err != nil {
			fail(err)
		}
		manifests = append(manifests, b)
	}
	if files, err = Release(files, *root, *release, manifests...); err != nil {
		fail(err)
	}
	path, err := Package(files, *pkg)
	if err != nil {
		fail(err)
	}
	fmt.Println(path)
	if *push != "" {
		ref, err := Push(path, *push, *release)
		if err != nil {
			fail(err)
		}
		fmt.Println(ref)
	}
}

// shape is a directory of config/ and when its files are included.
type shape struct {
	dir       string
	condition string // a Helm template condition
}

// The shapes, in the order their files are written.
var shapes = []shape{
	{"config", "not .Values.standalone"},
	{"config/nats", "and (not .Values.standalone) (eq (int .Values.nats.servers) 3)"},
	{"config/nats-single", "and (not .Values.standalone) (eq (int .Values.nats.servers) 1)"},
	{"config/dispatch", "and (not .Values.standalone) .Values.dispatch"},
	{"config/standalone", ".Values.standalone"},
	{"config/monitoring", ".Values.monitoring"},
}

// images maps each ko:// reference of config/ to its key in values.images.
var images = map[string]string{
	"ko://github.com/istio-aux/istio-aux/webhook/cmd/webhook":               "webhook",
	"ko://github.com/istio-aux/istio-aux/bridge/cmd/bridge":                 "bridge",
	"ko://github.com/istio-aux/istio-aux/bridge/cmd/natstoken":              "natstoken",
	"ko://github.com/istio-aux/istio-aux/functions/proxyquit/cmd/proxyquit": "proxyquit",
	"ko://github.com/istio-aux/istio-aux/cmd/allinone":                      "allinone",
	"ko://github.com/nats-io/nats-server/v2":                                "nats",
}

var (
	imageLine  = regexp.MustCompile(`(?m)^(\s*(?:- )?image: )(ko://\S+)\s*$`)
	pinnedLine = regexp.MustCompile(`(?m)^\s*(runAsUser|runAsGroup|fsGroup): .*$`)
	docEnd     = regexp.MustCompile(`(?m)(\n)---$`)
)

// endComment ends each document of a template.
const endComment = "# (end of document)"

// Generate returns the chart's files, by path within the chart.
func Generate(root string) (map[string][]byte, error) {
	out := map[string][]byte{
		"Chart.yaml":  []byte(fmt.Sprintf(chartYAML, versions.OldestMinor)),
		"values.yaml": []byte(valuesYAML),
		".helmignore": []byte("# Nothing of the chart is ignored: hack/chart writes every file.\n"),
	}
	// A file shared by shapes (config/standalone/'s links into config/) is
	// one template, included when any of its shapes is.
	type tmpl struct {
		name       string
		body       []byte
		conditions []string
	}
	byTarget := map[string]*tmpl{}
	var order []string
	for _, s := range shapes {
		paths, err := manifests(filepath.Join(root, s.dir))
		if err != nil {
			return nil, err
		}
		for _, path := range paths {
			target, err := filepath.EvalSymlinks(path)
			if err != nil {
				return nil, err
			}
			if t, ok := byTarget[target]; ok {
				t.conditions = append(t.conditions, s.condition)
				continue
			}
			body, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			rel, err := filepath.Rel(filepath.Join(root, "config"), target)
			if err != nil {
				return nil, err
			}
			name := strings.ReplaceAll(filepath.ToSlash(rel), "/", "_")
			byTarget[target] = &tmpl{name: name, body: body, conditions: []string{s.condition}}
			order = append(order, target)
		}
	}
	for _, target := range order {
		t := byTarget[target]
		body, err := templateOf(t.body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", target, err)
		}
		cond := t.conditions[0]
		if len(t.conditions) > 1 {
			cond = "or (" + strings.Join(t.conditions, ") (") + ")"
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "{{- /* Generated by hack/chart from config/%s: edit that file, then go run ./hack/chart. */ -}}\n",
			strings.ReplaceAll(t.name, "_", "/"))
		fmt.Fprintf(&b, "{{- if %s }}\n", cond)
		b.Write(body)
		if !bytes.HasSuffix(body, []byte("\n")) {
			b.WriteByte('\n')
		}
		// Not {{- end }}: it would trim the last block scalar's newline.
		b.WriteString("{{ end }}\n")
		out["templates/"+t.name] = b.Bytes()
	}
	// The dashboard: config/monitoring's kustomization makes it a
	// ConfigMap; the chart makes the same from its copy of the JSON.
	dash, err := os.ReadFile(filepath.Join(root, "config/monitoring/dashboards/istio-aux.json"))
	if err != nil {
		return nil, err
	}
	out["files/istio-aux.json"] = dash
	out["templates/monitoring_dashboard.yaml"] = []byte(dashboardYAML)
	return out, nil
}

// manifests are the paths of the manifests in dir, in kubectl apply -f's
// order: its YAML files but a kustomization (config/monitoring's).
func manifests(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") && e.Name() != "kustomization.yaml" {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// templateOf makes a manifest a template: its own braces (Prometheus's
// alert templates) kept as text, each ko:// image a value, each pinned ID
// left out under openshift.
func templateOf(body []byte) ([]byte, error) {
	s := string(body)
	s = strings.NewReplacer("{{", "{{`{{`}}", "}}", "{{`}}`}}").Replace(s)
	var missing []string
	s = imageLine.ReplaceAllStringFunc(s, func(line string) string {
		m := imageLine.FindStringSubmatch(line)
		key, ok := images[m[2]]
		if !ok {
			missing = append(missing, m[2])
			return line
		}
		return m[1] + "{{ .Values.images." + key + " }}"
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("images with no value: %v (add them to hack/chart's images)", missing)
	}
	s = pinnedLine.ReplaceAllStringFunc(s, func(line string) string {
		return "{{- if not .Values.openshift }}\n" + line + "\n{{- end }}"
	})
	// Helm trims each rendered document, which would take the newline off
	// a block scalar that ends one (config-istio-aux's _example, whose
	// checksum would then differ): a comment line ends every document.
	s = strings.TrimRight(s, "\n") + "\n"
	s = docEnd.ReplaceAllString(s, "$1"+endComment+"\n---")
	return []byte(s + endComment + "\n"), nil
}

// Write replaces dir with files.
func Write(files map[string][]byte, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[n], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Read is the files of the chart in dir, by path within it.
func Read(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	return out, err
}

// imageKeys are values.images' keys, sorted.
func imageKeys() []string {
	var ks []string
	for _, k := range images {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// chartYAML is the chart's Chart.yaml; its kubeVersion is the oldest
// Kubernetes the suites prove (pkg/versions), the webhook's own floor.
const chartYAML = `# Generated by hack/chart. make release sets version and appVersion.
apiVersion: v2
name: istio-aux
description: Job-like workloads (Jobs, CronJobs, Kubeflow and Argo) in an Istio mesh, unchanged
type: application
version: 0.0.0-dev
appVersion: dev
kubeVersion: ">=1.%d.0-0"
home: https://github.com/istio-aux/istio-aux
sources:
  - https://github.com/istio-aux/istio-aux
keywords: [istio, jobs, sidecar, kubeflow]
`

const dashboardYAML = `{{- /* Generated by hack/chart: config/monitoring/kustomization.yaml's ConfigMap of the dashboard. */ -}}
{{- if .Values.monitoring }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: istio-aux-dashboard
  namespace: istio-aux
  labels:
    grafana_dashboard: "1"
    app.kubernetes.io/name: istio-aux
    app.kubernetes.io/component: monitoring
data:
  istio-aux.json: |
{{ .Files.Get "files/istio-aux.json" | indent 4 }}
# (end of document)
{{ end }}
`

const valuesYAML = `# istio-aux's chart: generated by hack/chart from config/, whose manifests
# each shape renders unchanged (charts/istio-aux's defaults render exactly
# the release's istio-aux.yaml). Every component installs into the
# namespace istio-aux, as config/ does, whatever helm's --namespace.

# standalone: the all-in-ones of config/standalone/ (two replicas, embedded
# NATS, no Knative) instead of config/'s webhook, bridges, NATS cluster and
# Knative Service. The nats and dispatch values do not apply then.
standalone: false

nats:
  # servers: 3, a JetStream cluster (config/nats/, the default); 1, one
  # server (config/nats-single/); 0, none: bring your own and set nats-url
  # in ConfigMap config-istio-aux (docs/install.md).
  servers: 3

# dispatch: config/dispatch/'s dispatchers beside the bridges.
dispatch: false

# openshift: no pinned user, group or fsGroup in any pod (OpenShift's SCC
# restricted-v2 gives them from the namespace's range); the release's
# istio-aux-openshift.yaml. Grant the function's ServiceAccount what
# docs/install.md's OpenShift section says.
openshift: false

# monitoring: config/monitoring/'s PrometheusRule (needs the Prometheus
# Operator's CRD) and the Grafana dashboard's ConfigMap.
monitoring: false

# images: each image's reference. In the repository these are ko://
# paths (ko resolves them); a released chart carries the release's
# references, pinned by digest.
images:
  allinone: ko://github.com/istio-aux/istio-aux/cmd/allinone
  bridge: ko://github.com/istio-aux/istio-aux/bridge/cmd/bridge
  nats: ko://github.com/nats-io/nats-server/v2
  natstoken: ko://github.com/istio-aux/istio-aux/bridge/cmd/natstoken
  proxyquit: ko://github.com/istio-aux/istio-aux/functions/proxyquit/cmd/proxyquit
  webhook: ko://github.com/istio-aux/istio-aux/webhook/cmd/webhook
`
