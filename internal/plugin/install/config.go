package install

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/webhook"
)

// Keys of ConfigMap config-istio-aux that the plugin reads
// (config/300-config-istio-aux.yaml).
const (
	KeySidecars    = "sidecars"
	KeyQuitNative  = "quit-native"
	KeyQuitCommand = "quit-command"
	KeyMode        = "mode"
	KeyNATSURL     = "nats-url"
)

// Config is what ConfigMap config-istio-aux says, read as the components
// read it: the decision's options as the bridge and the function read
// their environment (decision.OptionsFromEnv), the mode as the webhook
// reads it. A value they would refuse is in Problems, and its default is
// used here.
type Config struct {
	// Found is false when the ConfigMap does not exist: every default
	// applies, and the exec policy denies every quit (its param is missing).
	Found    bool
	Decision decision.Options
	Mode     webhook.Mode
	// QuitCommand is the key's value, "" when unset (the function's
	// default then).
	QuitCommand string
	// NATSURL is where the bridge publishes; "" when unset or empty: the
	// bridge then runs an embedded nats-server.
	NATSURL  string
	Problems []string
}

// ConfigOf reads a ConfigMap (nil: not found).
func ConfigOf(cm *corev1.ConfigMap) Config {
	cfg := Config{Mode: webhook.DefaultConfig().Mode}
	if cm == nil {
		return cfg
	}
	cfg.Found = true
	// One key at a time, so that a bad value is named and the other key
	// still counts.
	for env, key := range map[string]string{decision.EnvSidecars: KeySidecars, decision.EnvQuitNative: KeyQuitNative} {
		opts, err := decision.OptionsFromEnv(func(name string) (string, bool) {
			if name != env {
				return "", false
			}
			v, ok := cm.Data[key]
			return v, ok
		})
		if err != nil {
			cfg.Problems = append(cfg.Problems, fmt.Sprintf("key %s: %v: the bridge and the function refuse to start", key, err))
			continue
		}
		cfg.Decision.ExtraSidecars = append(cfg.Decision.ExtraSidecars, opts.ExtraSidecars...)
		cfg.Decision.QuitNative = cfg.Decision.QuitNative || opts.QuitNative
	}
	slices.Sort(cfg.Problems)
	if w, err := webhook.NewConfigFromConfigMap(cm); err != nil {
		cfg.Problems = append(cfg.Problems, fmt.Sprintf("%v: the webhook keeps its previous mode", err))
	} else {
		cfg.Mode = w.Mode
	}
	cfg.NATSURL = strings.TrimSpace(cm.Data[KeyNATSURL])
	if v, ok := cm.Data[KeyQuitCommand]; ok {
		cfg.QuitCommand = v
		if strings.TrimSpace(v) == "" {
			cfg.Problems = append(cfg.Problems, "quit-command is empty: the function refuses to start")
		}
	}
	return cfg
}

// ReadConfig reads ConfigMap config-istio-aux in namespace ns. A missing
// ConfigMap is no error: Config.Found says so.
func ReadConfig(ctx context.Context, cs kubernetes.Interface, ns string) (Config, error) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, ConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ConfigOf(nil), nil
	}
	if err != nil {
		return ConfigOf(nil), fmt.Errorf("reading ConfigMap %s/%s: %w", ns, ConfigMap, err)
	}
	return ConfigOf(cm), nil
}
