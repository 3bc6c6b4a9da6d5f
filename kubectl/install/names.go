// Package install is what kubectl istio-aux knows of an installed istio-aux:
// the names config/ gives its objects (a test holds them to the manifests),
// and the reads both of its commands share: ConfigMap config-istio-aux and
// the webhook's endpoints.
package install

import "github.com/istio-aux/istio-aux/webhook"

// DefaultNamespace is the namespace config/ installs istio-aux in.
const DefaultNamespace = "istio-aux"

// Names of istio-aux's objects, as config/ (and config/standalone/,
// config/nats/) creates them. The webhook's are the webhook's own
// constants.
const (
	ConfigMap            = webhook.ConfigMapName
	WebhookConfiguration = webhook.ConfigurationName
	WebhookSecret        = webhook.SecretName
	// WebhookService is the Service the API server calls (401).
	WebhookService = "istio-aux-webhook"
	// WebhookDeployment runs the webhook (402).
	WebhookDeployment = "istio-aux-webhook"
	// BridgeDeployment watches pods and publishes (config/500).
	BridgeDeployment = "istio-aux-bridge"
	// AllInOneDeployment is config/standalone/'s one process: the bridge,
	// an embedded NATS and the function. Its presence says the install is
	// standalone.
	AllInOneDeployment = "istio-aux-allinone"
	// NATSStatefulSet is config/nats/'s NATS server.
	NATSStatefulSet = "istio-aux-nats"
	// FunctionService is the proxy-quit Knative Service (600); where
	// Knative Serving is not installed (the kwok harness, make run) a
	// Deployment of the same name stands in for it.
	FunctionService = "proxy-quit"
	// ExecPolicy and ExecCommandPolicy confine the function's exec (204);
	// ExecBinding, ExecCommandBinding and ExecCommandLegacyBinding bind
	// them (205), the last two with ConfigMap as their param.
	ExecPolicy               = "istio-aux-proxyquit-exec"
	ExecCommandPolicy        = "istio-aux-proxyquit-exec-command"
	ExecBinding              = "istio-aux-proxyquit-exec"
	ExecCommandBinding       = "istio-aux-proxyquit-exec-command"
	ExecCommandLegacyBinding = "istio-aux-proxyquit-exec-command-legacy"
	// FunctionServiceAccount is who execs the quit (200).
	FunctionServiceAccount = "istio-aux-proxyquit"
	// WatcherLease names the replica of the bridge (or of the all-in-one)
	// that watches pods: holderIdentity is its pod's name. The bridge
	// creates it at run time, so it is in no manifest.
	WatcherLease = "istio-aux-watcher"
	// MetricsPort is where every component serves /metrics.
	MetricsPort = "9090"
)

// Values of the label app.kubernetes.io/component on istio-aux's pods.
const (
	ComponentLabel     = "app.kubernetes.io/component"
	ComponentWebhook   = "webhook"
	ComponentBridge    = "bridge"
	ComponentDispatch  = "dispatch"
	ComponentAllInOne  = "allinone"
	ComponentProxyQuit = "proxyquit"
	ComponentNATS      = "nats"
)
