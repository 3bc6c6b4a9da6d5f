package istioaux

import "github.com/istio-aux/istio-aux/test/cluster"

// Pids are the process ids of the webhook and the bridge (0 when not
// running), for test/bench's memory readings.
func (a *IstioAux) Pids() (webhook, bridge int) { return pidOf(a.webhook), pidOf(a.bridge) }

// PeerPids are the process ids of the deployed shape's nats-server and
// proxy-quit function (0 when not running).
func (a *IstioAux) PeerPids() (nats, function int) { return pidOf(a.nats), pidOf(a.function) }

func pidOf(p *cluster.Process) int {
	if p == nil {
		return 0
	}
	return p.Pid()
}
