// Package docs holds the project's documentation; its test keeps
// metrics.md true to the code.
package docs

import (
	"os"
	"regexp"
	"testing"
)

// TestMetricsAreDocumented: every metric a component registers is in
// metrics.md with its type, and every metric there is registered.
func TestMetricsAreDocumented(t *testing.T) {
	registered := map[string]string{}
	for _, m := range Registered() {
		registered[m.Name] = m.Type
	}
	doc, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(istio_aux_[a-z_]+)` \\| ([a-z]+) \\|").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = m[2]
	}
	if len(registered) < 15 || len(documented) < 15 {
		t.Fatalf("found %d registered and %d documented metrics: the test lost its grip", len(registered), len(documented))
	}
	for n, typ := range registered {
		switch doc, ok := documented[n]; {
		case !ok:
			t.Errorf("%s is registered but not in metrics.md", n)
		case doc != typ:
			t.Errorf("metrics.md says %s is a %s; it is registered as a %s", n, doc, typ)
		}
	}
	for n := range documented {
		if _, ok := registered[n]; !ok {
			t.Errorf("metrics.md lists %s, which no component registers", n)
		}
	}
}
