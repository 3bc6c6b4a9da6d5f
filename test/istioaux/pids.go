package istioaux

// Pids are the process ids of the webhook and the bridge (0 when not
// running), for test/bench's memory readings.
func (a *IstioAux) Pids() (webhook, bridge int) {
	if a.webhook != nil {
		webhook = a.webhook.Pid()
	}
	if a.bridge != nil {
		bridge = a.bridge.Pid()
	}
	return webhook, bridge
}

// PeerPids are the process ids of the deployed shape's nats-server and
// proxy-quit function (0 when not running).
func (a *IstioAux) PeerPids() (nats, function int) {
	if a.nats != nil {
		nats = a.nats.Pid()
	}
	if a.function != nil {
		function = a.function.Pid()
	}
	return nats, function
}
