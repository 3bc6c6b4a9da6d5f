// Command record runs istio-aux's scenarios on the local control plane
// (test/cluster with kwok, istiod as the sidecar injector, the real webhook and
// bridge) and writes what was delivered into test/testdata, one folder per
// scenario: the events the bridge publishes for every state change (its own
// watcher and filter, in-process, with a recorder as publisher) or, where a
// scenario says so, the events a Knative ApiServerSource would have
// delivered for the same pods. hack/record.sh
// (make record) builds what it needs and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/realnode"
)

func main() {
	out := flag.String("out", filepath.Join(cluster.RepoRoot(), "test", "testdata"), "testdata directory to (re)write")
	timeout := flag.Duration("timeout", 5*time.Minute, "bound on the whole run, cluster starts included")
	only := flag.String("only", "", "comma-separated scenarios (namespaces) to record; empty: all")
	flag.Parse()
	// The real node's scenarios need its network namespace.
	os.Exit(realnode.RunInNetns(func() int {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		if err := run(ctx, *out, selected(scenarios(), *only)); err != nil {
			fmt.Fprintln(os.Stderr, "record:", err)
			return 1
		}
		return 0
	}))
}

// selected are the scenarios named in only (all when it is empty).
func selected(scs []scenario, only string) []scenario {
	if only == "" {
		return scs
	}
	return slices.DeleteFunc(scs, func(sc scenario) bool { return !slices.Contains(strings.Split(only, ","), sc.namespace) })
}
