// Package monitoring tests config/monitoring with Prometheus's own code, at
// the version hack/tools/prometheus/go.mod pins: the PrometheusRule's
// structure and its rules as Prometheus loads them (rule_test.go), the
// alerts' behaviour on series shaped like istio-aux's (alerts_test.go,
// cases in testdata/), and that every name the rules and the dashboard
// query is one istio-aux registers or a named external one (names_test.go).
//
// It is a module of its own because github.com/prometheus/prometheus moves
// k8s.io to versions istio-aux does not build with; what istio-aux
// registers comes from its module as a process (docs/cmd/metrics).
// Driving Prometheus's packages from a Go test rather than building
// promtool: promtool links every service discovery (cloud SDKs, client-go),
// 438 s cold on 2 cores against 75-125 s for these packages.
//
//	cd hack/tools/prometheus && go test ./monitoring/
package monitoring
