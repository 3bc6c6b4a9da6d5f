// Package docs holds the project's documentation; its test keeps
// metrics.md true to the code.
package docs

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestMetricsAreDocumented: every metric a component registers is in
// metrics.md with its type and labels, and every metric there is registered.
func TestMetricsAreDocumented(t *testing.T) {
	registered := map[string]Metric{}
	for _, m := range Registered() {
		registered[m.Name] = m
	}
	doc, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]Metric{}
	row := regexp.MustCompile("(?m)^\\| `(istio_aux_[a-z_]+)` \\| ([a-z]+) \\|([^|]*)\\|")
	label := regexp.MustCompile("`([a-z_]+)`")
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		var labels []string
		for _, l := range label.FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		documented[m[1]] = Metric{Name: m[1], Type: m[2], Labels: labels}
	}
	if len(registered) < 15 || len(documented) < 15 {
		t.Fatalf("found %d registered and %d documented metrics: the test lost its grip", len(registered), len(documented))
	}
	for n, reg := range registered {
		doc, ok := documented[n]
		switch {
		case !ok:
			t.Errorf("%s is registered but not in metrics.md", n)
		case doc.Type != reg.Type:
			t.Errorf("metrics.md says %s is a %s; it is registered as a %s", n, doc.Type, reg.Type)
		case !sameSet(doc.Labels, reg.Labels):
			t.Errorf("metrics.md gives %s the labels %v; it is registered with %v", n, doc.Labels, reg.Labels)
		}
	}
	for n := range documented {
		if _, ok := registered[n]; !ok {
			t.Errorf("metrics.md lists %s, which no component registers", n)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}
