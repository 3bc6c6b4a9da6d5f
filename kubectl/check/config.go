package check

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/kubectl/install"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// configItem reads config-istio-aux as the components read it.
func (r *run) configItem() Item {
	show := r.kubectl("get configmap " + names.ConfigMap + " -o yaml")
	cfg, err := install.ReadConfig(r.ctx, r.Client, r.SystemNamespace)
	r.config = cfg
	switch {
	case err != nil:
		return fail(ItemConfig, err.Error(), show)
	case !cfg.Found:
		return fail(ItemConfig, fmt.Sprintf("ConfigMap %s/%s is missing: the exec policy, whose param it is, denies every quit in opted-in namespaces",
			r.SystemNamespace, names.ConfigMap), show)
	case len(cfg.Problems) > 0:
		return fail(ItemConfig, strings.Join(append(cfg.Problems, r.ignored()...), "; "), show)
	}
	sidecars, command := "none", "the default"
	if len(cfg.Decision.ExtraSidecars) > 0 {
		sidecars = strings.Join(cfg.Decision.ExtraSidecars, ",")
	}
	if cfg.QuitCommand != "" {
		command = fmt.Sprintf("%q", strings.Join(strings.Fields(cfg.QuitCommand), " "))
	}
	native := "off"
	if cfg.Decision.QuitNative {
		native = "on"
	}
	says := fmt.Sprintf("mode %s, extra sidecars %s, quit-native %s, quit-command %s", cfg.Mode, sidecars, native, command)
	if ignored := r.ignored(); len(ignored) > 0 {
		return warn(ItemConfig, says+"; "+strings.Join(ignored, "; "), show)
	}
	return ok(ItemConfig, says)
}

// ignored is what the bridge and the function warn of in the ConfigMap
// (SettingsIgnored): keys no component reads, an edited _example.
func (r *run) ignored() []string {
	cm, err := r.Client.CoreV1().ConfigMaps(r.SystemNamespace).Get(r.ctx, names.ConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil // ReadConfig, just before, said what it could
	}
	return settings.Ignored(cm)
}
