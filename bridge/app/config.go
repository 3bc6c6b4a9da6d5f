// Package app wires the bridge binary: configuration from the environment
// and the components run for a role, with metrics and health endpoints.
package app

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/istio-aux/istio-aux/bridge/filter"
	"github.com/istio-aux/istio-aux/bridge/stream"
	"github.com/istio-aux/istio-aux/functions/proxyquit"
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

// Config is everything the binary reads from its environment, once.
type Config struct {
	Kubeconfig  string        // KUBECONFIG; empty: in-cluster
	NATSURL     string        // NATS_URL; empty: embedded server
	DataDir     string        // ISTIO_AUX_DATA_DIR, the embedded JetStream store
	Stream      string        // NATS_STREAM
	Sink        string        // K_SINK; empty: the function in-process
	Role        Role          // ISTIO_AUX_ROLE
	ClusterName string        // ISTIO_AUX_CLUSTER_NAME; empty: the API server URL
	Resync      time.Duration // ISTIO_AUX_RESYNC
	RecordDir   string        // ISTIO_AUX_RECORD_DIR; empty: no recording
	MetricsAddr string        // METRICS_ADDR
	Publish     filter.Mode   // ISTIO_AUX_PUBLISH
	SinkTimeout time.Duration // ISTIO_AUX_SINK_TIMEOUT, per HTTP delivery
	Function    proxyquit.Config
}

// ConfigFromEnv reads the environment; a set but invalid value is an error.
func ConfigFromEnv() (Config, error) {
	return configFromLookup(os.LookupEnv)
}

func configFromLookup(lookup func(string) (string, bool)) (Config, error) {
	get := func(k, def string) string {
		if v, ok := lookup(k); ok && v != "" {
			return v
		}
		return def
	}
	c := Config{
		Kubeconfig:  get("KUBECONFIG", ""),
		NATSURL:     get("NATS_URL", ""),
		DataDir:     get("ISTIO_AUX_DATA_DIR", filepath.Join(os.TempDir(), "istio-aux-jetstream")),
		Stream:      get("NATS_STREAM", stream.DefaultName),
		Sink:        get("K_SINK", ""),
		Role:        Role(get("ISTIO_AUX_ROLE", string(RoleAll))),
		ClusterName: get("ISTIO_AUX_CLUSTER_NAME", ""),
		RecordDir:   get("ISTIO_AUX_RECORD_DIR", ""),
		MetricsAddr: get("METRICS_ADDR", ":9090"),
	}
	switch c.Role {
	case RoleAll, RoleBridge, RoleDispatch:
	default:
		return c, fmt.Errorf("ISTIO_AUX_ROLE=%q: want all, bridge or dispatch", c.Role)
	}
	var err error
	if c.Resync, err = duration(get("ISTIO_AUX_RESYNC", "5m"), "ISTIO_AUX_RESYNC"); err != nil {
		return c, err
	}
	if c.SinkTimeout, err = duration(get("ISTIO_AUX_SINK_TIMEOUT", "30s"), "ISTIO_AUX_SINK_TIMEOUT"); err != nil {
		return c, err
	}
	if c.Resync > 0 && c.Resync <= stream.DuplicateWindow {
		// A resync inside the dedup window is always dropped as a
		// duplicate, so it could never retry a lost quit.
		return c, fmt.Errorf("ISTIO_AUX_RESYNC=%v must exceed the %v duplicate window", c.Resync, stream.DuplicateWindow)
	}
	if c.Publish, err = filter.ParseMode(get("ISTIO_AUX_PUBLISH", "")); err != nil {
		return c, fmt.Errorf("ISTIO_AUX_PUBLISH: %w", err)
	}
	if c.Function, err = proxyquit.ConfigFromEnv(); err != nil {
		return c, err
	}
	return c, nil
}

func duration(s, name string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 5m", name, s)
	}
	return d, nil
}
