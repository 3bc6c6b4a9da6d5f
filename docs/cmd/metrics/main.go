// Command metrics prints every metric istio-aux's components register, one
// "name type" a line (docs.Registered): for checks that live outside
// istio-aux's module, such as hack/tools/prometheus's test of the alerting
// rules and the dashboard.
package main

import (
	"fmt"

	"github.com/istio-aux/istio-aux/docs"
)

func main() {
	for _, m := range docs.Registered() {
		fmt.Println(m.Name, m.Type)
	}
}
