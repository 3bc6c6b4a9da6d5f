// Command coredns is CoreDNS (github.com/coredns/coredns) with only the
// plugins a cluster's DNS needs here: the harness's real node runs it as
// the cluster DNS (test/kubenode). CoreDNS supports builds with a chosen
// plugin set; this is one, made by importing the plugins instead of
// generating them from plugin.cfg. The full build links every cloud
// provider's SDK and costs minutes of CPU more, for nothing used here.
package main

import (
	"github.com/coredns/coredns/coremain"

	// What the Corefile of test/kubenode uses: answering for cluster.local
	// from the API (kubernetes), health and readiness for the probes,
	// caching, loop detection, metrics and errors in the log.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
