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
