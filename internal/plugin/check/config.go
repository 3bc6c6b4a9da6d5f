package check

import (
	"fmt"
	"strings"

	"github.com/istio-aux/istio-aux/internal/plugin/install"
)

// configItem reads config-istio-aux as the components read it.
func (r *run) configItem() Item {
	show := r.kubectl("get configmap " + install.ConfigMap + " -o yaml")
	cfg, err := install.ReadConfig(r.ctx, r.Client, r.SystemNamespace)
	r.config = cfg
	switch {
	case err != nil:
		return fail(ItemConfig, err.Error(), show)
	case !cfg.Found:
		return fail(ItemConfig, fmt.Sprintf("ConfigMap %s/%s is missing: the exec policy, whose param it is, denies every quit in opted-in namespaces",
			r.SystemNamespace, install.ConfigMap), show)
	case len(cfg.Problems) > 0:
		return fail(ItemConfig, strings.Join(cfg.Problems, "; "), show)
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
	return ok(ItemConfig, fmt.Sprintf("mode %s, extra sidecars %s, quit-native %s, quit-command %s", cfg.Mode, sidecars, native, command))
}
