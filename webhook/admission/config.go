package admission

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// Mode is how the webhook makes an app wait for its proxy.
type Mode string

const (
	// ModeHold merges holdApplicationUntilProxyStarts: true into the pod's
	// proxy.istio.io/config (the default; works with every Istio >= 1.8).
	ModeHold Mode = "hold"
	// ModeNative asks Istio for a native sidecar, which the kubelet starts
	// before the apps and stops after them (Kubernetes >= 1.29, Istio >= 1.24).
	ModeNative Mode = "native"
)

// Config is the part of ConfigMap config-istio-aux the webhook reads.
type Config struct {
	Mode Mode
}

// DefaultConfig is what a missing ConfigMap or missing key means.
func DefaultConfig() *Config { return &Config{Mode: ModeHold} }

// NewConfigFromConfigMap parses the webhook's settings. An unknown mode is an
// error (rather than a silent default) so that a typo is visible in the log
// and the previous, working mode stays in force.
func NewConfigFromConfigMap(cm *corev1.ConfigMap) (*Config, error) {
	cfg := DefaultConfig()
	if cm == nil {
		return cfg, nil
	}
	// The key is names.KeyMode, so that the bridge and the function,
	// which warn of keys no component reads, know it.
	switch v := Mode(strings.ToLower(strings.TrimSpace(cm.Data[names.KeyMode]))); v {
	case "":
	case ModeHold, ModeNative:
		cfg.Mode = v
	default:
		return nil, fmt.Errorf("configmap %s: %s %q is neither %q nor %q", cm.Name, names.KeyMode, cm.Data[names.KeyMode], ModeHold, ModeNative)
	}
	return cfg, nil
}
