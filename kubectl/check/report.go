// Package check says whether an istio-aux install is healthy, one item per
// part, each OK or what is wrong with the command that shows it. kubectl
// istio-aux check prints it. It reads the cluster only through the API
// server (NATS is behind a NetworkPolicy): the stream's backlog comes from
// a dispatcher's metrics through the API server's pod proxy.
package check

// Status is an item's result.
type Status string

// Statuses, from best to worst.
const (
	StatusOK   Status = "ok"
	StatusWarn Status = "warn"
	StatusFail Status = "fail"
)

// Item is one part of the install.
type Item struct {
	// Name is the item's stable name (the Item* constants).
	Name    string `json:"name"`
	Status  Status `json:"status"`
	Message string `json:"message"`
	// Command shows more (kubectl ...), for an item that is not OK or has
	// a list behind it.
	Command string `json:"command,omitempty"`
	// Values is the list behind the message (the watched namespaces),
	// printed with --verbose.
	Values []string `json:"values,omitempty"`
}

// Items, in the order Run checks them.
const (
	ItemKubernetes           = "kubernetes"
	ItemWebhookConfiguration = "webhook-configuration"
	ItemWebhookCertificate   = "webhook-certificate"
	ItemWebhookEndpoints     = "webhook-endpoints"
	ItemConfig               = "config"
	ItemExecPolicy           = "exec-policy"
	ItemWatcher              = "watcher"
	ItemWatchedNamespaces    = "watched-namespaces"
	ItemNATS                 = "nats"
	ItemBacklog              = "backlog"
	ItemFunction             = "function"
	// ItemFunctionNodeLoss is whether the function's Knative Service
	// outlives a node's loss (only when there is one).
	ItemFunctionNodeLoss = "function-node-loss"
)

// Shapes of install.
const (
	// ShapeConfig is config/: the bridge, NATS, the function as a Knative
	// Service.
	ShapeConfig = "config"
	// ShapeStandalone is config/standalone/: the all-in-one Deployment.
	ShapeStandalone = "standalone"
)

// Report is the install's health.
type Report struct {
	// Shape is ShapeConfig or ShapeStandalone.
	Shape string `json:"shape"`
	// OK is true when no item failed (warnings allowed).
	OK    bool   `json:"ok"`
	Items []Item `json:"items"`
}

// Worst is the worst status of the report's items.
func (r Report) Worst() Status {
	worst := StatusOK
	for _, it := range r.Items {
		switch it.Status {
		case StatusFail:
			return StatusFail
		case StatusWarn:
			worst = StatusWarn
		}
	}
	return worst
}

func ok(name, message string) Item { return Item{Name: name, Status: StatusOK, Message: message} }

func warn(name, message, command string) Item {
	return Item{Name: name, Status: StatusWarn, Message: message, Command: command}
}

func fail(name, message, command string) Item {
	return Item{Name: name, Status: StatusFail, Message: message, Command: command}
}
