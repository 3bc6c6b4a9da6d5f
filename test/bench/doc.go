// Package bench holds istio-aux's measured benchmarks that need a real
// control plane (test/cluster): pod CREATE latency with and without the
// webhook, the bridge's resident memory against a full-pod informer
// (cmd/fullinformer), reaction latency against a floor (package quitter;
// as a process of its own, cmd/floorquit, where its CPU is read) and the
// reference implementation's serial approach, and 1,000 Jobs at once. They are
// e2e-tagged tests; hack/bench.sh (make bench) runs them and prints the
// table. See docs/bench.md for the method.
package bench
