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

	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// Config is what ConfigMap config-istio-aux says, read as the components
// read it: the decision's options as the bridge and the function read
// it (settings.Apply), the mode as the webhook
// reads it. A value they would refuse is in Problems, and its default is
// used here.
type Config struct {
	// Found is false when the ConfigMap does not exist: every default
	// applies, and the exec policy denies every quit (its param is missing).
	Found    bool
	Decision decision.Options
	Mode     admission.Mode
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
	cfg := Config{Mode: admission.DefaultConfig().Mode}
	if cm == nil {
		return cfg
	}
	cfg.Found = true
	// Read as the bridge and the function read it: a bad key is named,
	// the others still count.
	set, errs := settings.Apply(settings.Defaults(), settings.Defaults(), cm.Data)
	cfg.Decision = set.Decision
	for _, err := range errs {
		cfg.Problems = append(cfg.Problems, fmt.Sprintf("key %v: the bridge and the function refuse it and keep the value they had", err))
	}
	slices.Sort(cfg.Problems)
	if w, err := admission.NewConfigFromConfigMap(cm); err != nil {
		cfg.Problems = append(cfg.Problems, fmt.Sprintf("%v: the webhook keeps its previous mode", err))
	} else {
		cfg.Mode = w.Mode
	}
	cfg.NATSURL = strings.TrimSpace(cm.Data[settings.KeyNATSURL])
	if v, ok := cm.Data[settings.KeyQuitCommand]; ok {
		cfg.QuitCommand = v
	}
	return cfg
}

// ReadConfig reads ConfigMap config-istio-aux in namespace ns. A missing
// ConfigMap is no error: Config.Found says so.
func ReadConfig(ctx context.Context, cs kubernetes.Interface, ns string) (Config, error) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, names.ConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ConfigOf(nil), nil
	}
	if err != nil {
		return ConfigOf(nil), fmt.Errorf("reading ConfigMap %s/%s: %w", ns, names.ConfigMap, err)
	}
	return ConfigOf(cm), nil
}
