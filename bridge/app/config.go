// Package app wires the bridge binary: configuration from the environment,
// the components run for a role, and the metrics and health endpoints. It
// never builds the function: whoever calls Run hands it the sink.
package app

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/istio-aux/istio-aux/internal/env"
	"github.com/istio-aux/istio-aux/internal/settings"
)

// Role says which halves of the pipeline a process runs.
type Role string

// Roles (ISTIO_AUX_ROLE).
const (
	RoleAll      Role = "all"
	RoleBridge   Role = "bridge"
	RoleDispatch Role = "dispatch"
)

// Watches reports whether the role runs the watcher and publisher.
func (r Role) Watches() bool { return r == RoleAll || r == RoleBridge }

// Dispatches reports whether the role runs the dispatcher.
func (r Role) Dispatches() bool { return r == RoleAll || r == RoleDispatch }

// Config is everything the bridge reads from its environment, once.
type Config struct {
	Kubeconfig string // KUBECONFIG; empty: in-cluster
	NATSURL    string // NATS_URL; empty: embedded server
	// NATSURLSet: NATS_URL is in the environment, even empty (config/
	// sets it from config-istio-aux's nats-url): a change of that key
	// then starts the process again, to read it anew.
	NATSURLSet bool
	// NATSSecretDir (NATS_SECRET_DIR) holds the NATS credentials and TLS
	// files (transport.SecurityFromDir), copied from a Secret.
	NATSSecretDir string
	DataDir       string // ISTIO_AUX_DATA_DIR, the embedded JetStream store
	Stream        string // NATS_STREAM
	Sink          string // K_SINK, where the dispatcher POSTs events
	// SinkEndpoints (ISTIO_AUX_SINK_ENDPOINTS) is a label selector of the
	// function's EndpointSlices in SystemNamespace (its Knative revisions'
	// private Services): the dispatcher delivers to their ready pods
	// itself, and through K_SINK when none is ready. Empty: K_SINK only.
	SinkEndpoints string
	Role          Role   // ISTIO_AUX_ROLE
	ClusterName   string // ISTIO_AUX_CLUSTER_NAME; empty: the API server URL
	// Settings are config-istio-aux's keys as the environment starts them
	// (settings.FromEnv: ISTIO_AUX_SIDECARS, ISTIO_AUX_QUIT_NATIVE,
	// ISTIO_AUX_RESYNC); the ConfigMap, followed in SystemNamespace,
	// overrides them while the bridge runs.
	Settings settings.Settings
	// SystemNamespace (SYSTEM_NAMESPACE) holds config-istio-aux and the
	// Lease; "" follows no ConfigMap.
	SystemNamespace string
	MetricsAddr     string        // METRICS_ADDR
	SinkTimeout     time.Duration // ISTIO_AUX_SINK_TIMEOUT, per HTTP delivery
	// SinkTokenFile (ISTIO_AUX_SINK_TOKEN_FILE) holds the bearer token the
	// dispatcher presents to the function: a projected ServiceAccount token
	// made for the function's audience.
	SinkTokenFile string
	// Profiling (ISTIO_AUX_PROFILING=true) serves Go's profiles on the
	// metrics port at /debug/pprof/.
	Profiling bool
	// Election (ISTIO_AUX_LEASE, SYSTEM_NAMESPACE, POD_NAME) decides which
	// replica watches (roles that watch only).
	Election Election
}

// ConfigFromEnv reads the environment; a set but invalid value is an error.
func ConfigFromEnv() (Config, error) {
	return configFromLookup(env.OS)
}

func configFromLookup(lookup env.Lookup) (Config, error) {
	c := Config{
		Kubeconfig:    env.Kubeconfig.Or(lookup),
		NATSURL:       env.NATSURL.Or(lookup),
		DataDir:       cmp.Or(env.DataDir.Or(lookup), filepath.Join(os.TempDir(), "istio-aux-jetstream")),
		Stream:        env.NATSStream.Or(lookup),
		Sink:          env.Sink.Or(lookup),
		SinkEndpoints: env.SinkEndpoints.Or(lookup),
		Role:          Role(env.Role.Or(lookup)),
		ClusterName:   env.ClusterName.Or(lookup),
		MetricsAddr:   env.MetricsAddr.Or(lookup),
		SinkTokenFile: env.SinkTokenFile.Or(lookup),
		NATSSecretDir: env.NATSSecretDir.Or(lookup),
	}
	switch c.Role {
	case RoleAll, RoleBridge, RoleDispatch:
	default:
		return c, fmt.Errorf("ISTIO_AUX_ROLE=%q: want all, bridge or dispatch", c.Role)
	}
	var err error
	if c.Settings, err = settings.FromEnv(lookup); err != nil {
		return c, err
	}
	c.Settings.NATSURL = c.NATSURL
	_, c.NATSURLSet = env.NATSURL.In(lookup)
	c.SystemNamespace = env.SystemNamespace.Or(lookup)
	if c.SinkEndpoints != "" {
		if _, err := labels.Parse(c.SinkEndpoints); err != nil {
			return c, fmt.Errorf("ISTIO_AUX_SINK_ENDPOINTS=%q: want a label selector: %w", c.SinkEndpoints, err)
		}
		if c.SystemNamespace == "" {
			return c, fmt.Errorf("ISTIO_AUX_SINK_ENDPOINTS needs SYSTEM_NAMESPACE, the namespace of the function's EndpointSlices")
		}
	}
	if c.SinkTimeout, err = duration(env.SinkTimeout.Or(lookup), env.SinkTimeout.Name); err != nil {
		return c, err
	}
	c.Profiling = env.Profiling.Or(lookup) == "true"
	if c.Role.Watches() {
		if c.Election, err = electionFromLookup(lookup); err != nil {
			return c, err
		}
	}
	return c, nil
}

// electionFromLookup reads the election: ISTIO_AUX_LEASE names the Lease
// (names.WatcherLease when unset; set and empty, no election), in the namespace
// SYSTEM_NAMESPACE, held under the name POD_NAME (else the host name).
func electionFromLookup(lookup env.Lookup) (Election, error) {
	e := DefaultElection()
	if lease, ok := env.Lease.In(lookup); ok {
		e.Lease = lease
	}
	if e.Lease == "" {
		return e, nil
	}
	e.Namespace, _ = env.SystemNamespace.In(lookup)
	if e.Namespace == "" {
		return e, fmt.Errorf("the Lease %s needs SYSTEM_NAMESPACE, the namespace it is in (or set ISTIO_AUX_LEASE= to watch without an election: one replica only)", e.Lease)
	}
	e.Identity, _ = env.PodName.In(lookup)
	if e.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return e, fmt.Errorf("no POD_NAME, and the host name: %w", err)
		}
		e.Identity = host
	}
	return e, nil
}

// ErrNoSink is returned when a dispatcher has nowhere to deliver: the
// bridge binary needs K_SINK (the all-in-one command calls the function
// in-process instead).
var ErrNoSink = errors.New("K_SINK is not set: the dispatcher needs the proxy-quit function's address")

func duration(s, name string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 5m", name, s)
	}
	return d, nil
}
