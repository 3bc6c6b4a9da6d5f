// Command metrics prints every metric istio-aux's components register
// (docs.Registered), one a line: its name, its type, and its labels joined
// by commas ("-" for none). For checks that live outside istio-aux's
// module: hack/tools/prometheus tests the alerting rules and the dashboard
// against it.
package main

import (
	"fmt"
	"strings"

	"github.com/istio-aux/istio-aux/docs"
)

func main() {
	for _, m := range docs.Registered() {
		labels := strings.Join(m.Labels, ",")
		if labels == "" {
			labels = "-"
		}
		fmt.Println(m.Name, m.Type, labels)
	}
}
