// Package env is every environment variable istio-aux's processes read,
// and every one config/ sets for a program istio-aux ships or runs: its
// name, default, type, description and readers, in one place (as Istio's
// pkg/env keeps its own). Components read their variables through it, and
// nothing under cmd/, bridge/, functions/ or webhook/ calls os.Getenv;
// docs/environment.md is generated from it, and a test holds config/ to it
// (docs/environment_test.go).
package env

import (
	"os"
	"slices"
	"strings"
)

// Reader is a program that reads a variable.
type Reader string

// The readers: istio-aux's commands, and the programs config/ runs whose
// variables it sets.
const (
	Bridge       Reader = "bridge"    // bridge/cmd/bridge, in every ISTIO_AUX_ROLE
	AllInOne     Reader = "allinone"  // cmd/allinone (config/standalone)
	ProxyQuit    Reader = "proxyquit" // functions/proxyquit/cmd/proxyquit
	Webhook      Reader = "webhook"   // webhook/cmd/webhook
	NATSTokenCmd Reader = "natstoken" // bridge/cmd/natstoken, NATS's and the bridges' init container
	// Knative is knative.dev/pkg, inside the webhook (sharedmain, its
	// webhook options): read there, not by istio-aux's code.
	Knative Reader = "knative.dev/pkg"
	// NATSServer is nats-server, whose configuration (config/nats)
	// interpolates them.
	NATSServer Reader = "nats-server"
	// GoRuntime is the Go runtime of every istio-aux process.
	GoRuntime Reader = "Go runtime"
)

// Var is one environment variable.
type Var struct {
	Name string
	// Default is the value an unset variable stands for, "" for none (the
	// description says what unset means then).
	Default string
	// Type is how the value is read: string, bool, duration, list (comma
	// separated), command (split on blanks), address, path or URL.
	Type        string
	Description string
	Readers     []Reader
}

// Lookup finds a variable: os.LookupEnv in a process, a map in a test.
type Lookup func(name string) (string, bool)

// OS is the process's environment.
var OS Lookup = os.LookupEnv

// Map is a Lookup over m.
func Map(m map[string]string) Lookup {
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

// In is v's value in l, and whether it is set there.
func (v *Var) In(l Lookup) (string, bool) { return l(v.Name) }

// Or is v's value in l, or its Default when unset or empty.
func (v *Var) Or(l Lookup) string {
	if s, ok := l(v.Name); ok && s != "" {
		return s
	}
	return v.Default
}

// Get is v's value in the process's environment, or its Default.
func (v *Var) Get() string { return v.Or(OS) }

// ReadBy reports whether r reads v.
func (v *Var) ReadBy(r Reader) bool { return slices.Contains(v.Readers, r) }

var registry []*Var

func register(v Var) *Var {
	p := &v
	registry = append(registry, p)
	return p
}

// All is every variable, sorted by name.
func All() []Var {
	out := make([]Var, 0, len(registry))
	for _, v := range registry {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b Var) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Ours are istio-aux's own programs (the others read what config/ sets).
var Ours = []Reader{Bridge, AllInOne, ProxyQuit, Webhook, NATSTokenCmd}

// Where things are.
var (
	SystemNamespace = register(Var{Name: "SYSTEM_NAMESPACE", Type: "string",
		Description: "istio-aux's namespace: where its ConfigMaps (config-istio-aux, config-logging, config-leader-election), the watcher's Lease, the NATS Secret and the function's EndpointSlices are. Unset (a local run): nothing is followed, logging is at info, the defaults and the environment stand.",
		Readers:     Ours})
	Kubeconfig = register(Var{Name: "KUBECONFIG", Type: "path",
		Description: "a kubeconfig file; unset: the in-cluster configuration.",
		Readers:     []Reader{Bridge, AllInOne, ProxyQuit, NATSTokenCmd}})
	PodName = register(Var{Name: "POD_NAME", Type: "string",
		Description: "the pod's name (the downward API): the bridge's identity in the watcher's Lease (unset: the host name); nats-server's server_name.",
		Readers:     []Reader{Bridge, AllInOne, NATSServer}})
	PodNamespace = register(Var{Name: "POD_NAMESPACE", Type: "string",
		Description: "the pod's namespace (the downward API), for nats-server's configuration.",
		Readers:     []Reader{NATSServer}})
	MetricsAddr = register(Var{Name: "METRICS_ADDR", Default: ":9090", Type: "address",
		Description: "where /metrics, /healthz and /readyz are served.",
		Readers:     []Reader{Bridge, AllInOne, ProxyQuit}})
	Port = register(Var{Name: "PORT", Default: "8080", Type: "string",
		Description: "the function's HTTP port for CloudEvents (Knative Serving sets it).",
		Readers:     []Reader{ProxyQuit}})
	GOGC = register(Var{Name: "GOGC", Type: "string",
		Description: "the garbage collector's target; unset, each command sets its own (internal/startup).",
		Readers:     []Reader{GoRuntime, Bridge, AllInOne, ProxyQuit, Webhook}})
)

// The bridge: its roles, NATS, the sink, the election.
var (
	Role = register(Var{Name: "ISTIO_AUX_ROLE", Default: "all", Type: "string",
		Description: "what the process runs: all (watch and dispatch), bridge (watch; with the Lease, one replica at a time) or dispatch (deliver only).",
		Readers:     []Reader{Bridge, AllInOne}})
	NATSURL = register(Var{Name: "NATS_URL", Type: "URL",
		Description: "NATS servers, comma separated; unset: an embedded nats-server, reached in-process only (the all-in-one). config/ sets it from config-istio-aux's nats-url, and a change there restarts the process.",
		Readers:     []Reader{Bridge, AllInOne}})
	NATSStream = register(Var{Name: "NATS_STREAM", Default: "ISTIO_AUX", Type: "string",
		Description: "the JetStream stream (and its durable consumer and key-value bucket's prefix).",
		Readers:     []Reader{Bridge, AllInOne}})
	NATSSecretDir = register(Var{Name: "NATS_SECRET_DIR", Type: "path",
		Description: "a directory holding the NATS credentials (token, and TLS files if any), copied there by natstoken; unset: none.",
		Readers:     []Reader{Bridge, AllInOne}})
	NATSSecret = register(Var{Name: "NATS_SECRET", Default: "istio-aux-nats", Type: "string",
		Description: "the Secret natstoken fills with a random token on first start, or copies into a directory (-copy).",
		Readers:     []Reader{NATSTokenCmd}})
	NATSToken = register(Var{Name: "NATS_TOKEN", Type: "string",
		Description: "the NATS token (from the Secret), for nats-server's client and route authorization.",
		Readers:     []Reader{NATSServer}})
	NATSRoute0 = register(Var{Name: "NATS_ROUTE_0", Type: "URL", Description: "the first server's cluster route, with its credentials.", Readers: []Reader{NATSServer}})
	NATSRoute1 = register(Var{Name: "NATS_ROUTE_1", Type: "URL", Description: "the second server's cluster route, with its credentials.", Readers: []Reader{NATSServer}})
	NATSRoute2 = register(Var{Name: "NATS_ROUTE_2", Type: "URL", Description: "the third server's cluster route, with its credentials.", Readers: []Reader{NATSServer}})
	DataDir    = register(Var{Name: "ISTIO_AUX_DATA_DIR", Type: "path",
		Description: "the embedded nats-server's store; unset: istio-aux-jetstream in the temporary directory.",
		Readers:     []Reader{Bridge, AllInOne}})
	Sink = register(Var{Name: "K_SINK", Type: "URL",
		Description: "the proxy-quit function's address, where the dispatcher delivers (the bridge's dispatch and all roles need it; the all-in-one calls the function in-process).",
		Readers:     []Reader{Bridge}})
	SinkEndpoints = register(Var{Name: "ISTIO_AUX_SINK_ENDPOINTS", Type: "string",
		Description: "a label selector of the function's EndpointSlices in SYSTEM_NAMESPACE: the dispatcher delivers to its ready pods directly; unset: to K_SINK.",
		Readers:     []Reader{Bridge}})
	SinkTokenFile = register(Var{Name: "ISTIO_AUX_SINK_TOKEN_FILE", Type: "path",
		Description: "a projected ServiceAccount token the dispatcher sends to the function as its bearer; unset: none.",
		Readers:     []Reader{Bridge}})
	SinkTimeout = register(Var{Name: "ISTIO_AUX_SINK_TIMEOUT", Default: "30s", Type: "duration",
		Description: "how long one delivery to the function may take.",
		Readers:     []Reader{Bridge}})
	ClusterName = register(Var{Name: "ISTIO_AUX_CLUSTER_NAME", Type: "string",
		Description: "the cluster's name in the events' source; unset: none.",
		Readers:     []Reader{Bridge, AllInOne}})
	Profiling = register(Var{Name: "ISTIO_AUX_PROFILING", Default: "false", Type: "bool",
		Description: "true serves Go's pprof on the metrics address.",
		Readers:     []Reader{Bridge, AllInOne}})
	Lease = register(Var{Name: "ISTIO_AUX_LEASE", Default: "istio-aux-watcher", Type: "string",
		Description: "the watcher's Lease in SYSTEM_NAMESPACE; set and empty: no election, the process always watches (one replica only). Its timings: config-leader-election.",
		Readers:     []Reader{Bridge, AllInOne}})
)

// The starting values of config-istio-aux's keys (internal/settings): the
// ConfigMap, when followed, overrides them key by key.
var (
	Sidecars = register(Var{Name: "ISTIO_AUX_SIDECARS", Type: "list",
		Description: "config-istio-aux's sidecars: containers that are not apps.",
		Readers:     []Reader{Bridge, AllInOne, ProxyQuit}})
	QuitNative = register(Var{Name: "ISTIO_AUX_QUIT_NATIVE", Default: "false", Type: "bool",
		Description: "config-istio-aux's quit-native.",
		Readers:     []Reader{Bridge, AllInOne, ProxyQuit}})
	QuitCommand = register(Var{Name: "ISTIO_AUX_QUIT_COMMAND", Default: "pilot-agent request POST quitquitquit", Type: "command",
		Description: "config-istio-aux's quit-command, exec'd in istio-proxy.",
		Readers:     []Reader{Bridge, AllInOne, ProxyQuit}})
	Resync = register(Var{Name: "ISTIO_AUX_RESYNC", Default: "5m", Type: "duration",
		Description: "config-istio-aux's resync-period.",
		Readers:     []Reader{Bridge, AllInOne, ProxyQuit}})
)

// The proxy-quit function.
var (
	ExecTimeout = register(Var{Name: "ISTIO_AUX_EXEC_TIMEOUT", Default: "10s", Type: "duration",
		Description: "bounds one exec of the quit command, connection included.",
		Readers:     []Reader{ProxyQuit, AllInOne}})
	Auth = register(Var{Name: "ISTIO_AUX_AUTH", Default: "on", Type: "string",
		Description: "on: the function admits only callers whose token the API server's TokenReview accepts for an audience and a caller below; off: any caller (a local run).",
		Readers:     []Reader{ProxyQuit, AllInOne}})
	AuthAudiences = register(Var{Name: "ISTIO_AUX_AUTH_AUDIENCES", Default: "istio-aux-proxyquit", Type: "list",
		Description: "the audiences a caller's token may be for.",
		Readers:     []Reader{ProxyQuit, AllInOne}})
	AuthCallers = register(Var{Name: "ISTIO_AUX_AUTH_CALLERS", Default: "system:serviceaccount:istio-aux:istio-aux-bridge", Type: "list",
		Description: "the users (ServiceAccounts) who may call.",
		Readers:     []Reader{ProxyQuit, AllInOne}})
)

// The webhook: its own, and knative.dev/pkg's (read by knative, listed here
// because config/ sets them).
var (
	DisableHealthProbes = register(Var{Name: "ISTIO_AUX_DISABLE_HEALTH_PROBES", Default: "false", Type: "bool",
		Description: "true turns off knative's probe server, whose port is fixed (local runs beside other webhooks).",
		Readers:     []Reader{Webhook}})
	WebhookName = register(Var{Name: "WEBHOOK_NAME", Type: "string",
		Description: "the webhook's Service (knative's webhook options).",
		Readers:     []Reader{Knative}})
	WebhookPort = register(Var{Name: "WEBHOOK_PORT", Default: "8443", Type: "string",
		Description: "the webhook's HTTPS port (knative's webhook options).",
		Readers:     []Reader{Knative}})
	WebhookSecretName = register(Var{Name: "WEBHOOK_SECRET_NAME", Default: "istio-aux-webhook-certs", Type: "string",
		Description: "the Secret of the webhook's certificates, which knative mints and rotates.",
		Readers:     []Reader{Knative}})
	KubernetesMinVersion = register(Var{Name: "KUBERNETES_MIN_VERSION", Type: "string",
		Description: "the oldest API server knative's sharedmain starts against (its own default otherwise).",
		Readers:     []Reader{Knative}})
)
