// Package names spells the names istio-aux's parts share with each other,
// with config/ and with kubectl istio-aux, which reads what the others
// write: the objects config/ installs in the system namespace, the Events
// the components record and who records them, the metric the plugin reads.
// Each is defined here once, and the components and the plugin use this
// one definition; a test holds the objects' names to config/. Like pkg/keys
// (the labels and annotations on users' objects), they are part of
// istio-aux's contract: renaming one is an upgrade to plan for.
package names

// DefaultNamespace is the namespace config/ installs istio-aux in, its
// system namespace (each component is told which it is at run time).
const DefaultNamespace = "istio-aux"

// Names of istio-aux's objects, as config/ (and config/standalone/,
// config/nats/) creates them.
const (
	// ConfigMap holds istio-aux's settings (config/300): the webhook's
	// mode, the decision's options, the quit command, nats-url.
	ConfigMap = "config-istio-aux"
	// KeyMode is ConfigMap's key for the webhook's mode (hold or native),
	// read by webhook/admission's NewConfigFromConfigMap; internal/settings
	// holds the other keys.
	KeyMode = "mode"
	// LeaderElectionConfigMap is knative.dev/pkg's ConfigMap of leader
	// election timings (config/300-config-leader-election.yaml): the
	// webhook's reconciler reads it through knative's sharedmain, the
	// bridge and the all-in-one for the watcher's Lease (bridge/app).
	LeaderElectionConfigMap = "config-leader-election"
	// WebhookConfiguration is the MutatingWebhookConfiguration (403),
	// which the webhook's reconciler keeps current. The API server calls
	// mutating configurations in name order, and this must run before
	// Istio's injector ("istio-sidecar-injector*", "istio-revision-tag-*")
	// so that the injector sees the webhook's annotation.
	WebhookConfiguration = "istio-aux-webhook"
	// WebhookSecret holds the webhook's serving certificate (filled by
	// knative's certificates controller; the YAML creates it empty).
	WebhookSecret = "istio-aux-webhook-certs"
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
	// that watches pods: its holderIdentity is that pod's name. Both
	// install shapes use it, so that a bridge and an all-in-one never
	// watch at once. The bridge creates it at run time: it is in no
	// manifest.
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

// MetricDispatchBacklog is the dispatchers' gauge of the events the
// stream holds that are not yet delivered, which kubectl istio-aux check
// reads through the API server's pod proxy.
const MetricDispatchBacklog = "istio_aux_dispatch_backlog"
