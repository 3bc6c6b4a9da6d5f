package docs

import (
	"fmt"
	"strings"

	"github.com/istio-aux/istio-aux/internal/env"
)

// EnvironmentReference is environment.md: every variable of internal/env,
// generated (TestEnvironmentReference holds the file to it; -update
// writes it).
func EnvironmentReference() string {
	var b strings.Builder
	b.WriteString(`# Environment variables

Every environment variable istio-aux's programs read, and every one config/ sets, with its default, its
type and who reads it. Generated from [internal/env](../internal/env/env.go), the one place each is
defined and read through: ` + "`go test ./docs/ -run TestEnvironmentReference -update`" + ` writes this file, and
` + "`TestConfigSetsOnlyRegisteredVariables`" + ` fails when config/ sets a variable the registry does not know or
gives it to a program that does not read it. The settings users change are config-istio-aux's keys
(README, Configure), config-logging's and config-leader-election's; these variables are for the
manifests, local runs and tests.

| variable | default | type | read by | what it is |
|---|---|---|---|---|
`)
	for _, v := range env.All() {
		def := "—"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		readers := make([]string, len(v.Readers))
		for i, r := range v.Readers {
			readers[i] = string(r)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", v.Name, def, v.Type, strings.Join(readers, ", "), strings.ReplaceAll(v.Description, "|", "\\|"))
	}
	return b.String()
}
