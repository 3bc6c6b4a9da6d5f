package proxyconfig_test

import (
	"strings"
	"testing"

	"github.com/istio-aux/istio-aux/webhook/proxyconfig"
)

// TestIstioHold: the hold as Istio reads it, in YAML 1.1 and both
// spellings, and Istio's refusals as errors.
func TestIstioHold(t *testing.T) {
	tests := map[string]struct {
		config    string
		hold, set bool
		err       string
	}{
		"no config":                 {"", false, false, ""},
		"other keys only":           {"concurrency: 2", false, false, ""},
		"true":                      {"holdApplicationUntilProxyStarts: true", true, true, ""},
		"the user's false":          {"holdApplicationUntilProxyStarts: false", false, true, ""},
		"proto spelling":            {"hold_application_until_proxy_starts: true", true, true, ""},
		"camelCase wins over proto": {"hold_application_until_proxy_starts: true\nholdApplicationUntilProxyStarts: false", false, true, ""},
		"YAML 1.1 yes is true":      {"holdApplicationUntilProxyStarts: yes", true, true, ""},
		"flow style":                {"{concurrency: 2, holdApplicationUntilProxyStarts: true}", true, true, ""},
		"a string Istio rejects":    {`holdApplicationUntilProxyStarts: "true"`, false, false, "Istio rejects it"},
		"not YAML":                  {"holdApplicationUntilProxyStarts: [", false, false, "Istio rejects it"},
		"over the limits":           {strings.Repeat("# padding\n", 1000), false, false, "longer than"},
	}
	for name, tc := range tests {
		hold, set, err := proxyconfig.IstioHold(tc.config)
		if hold != tc.hold || set != tc.set || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: IstioHold = %v, %v, %v; want %v, %v, error with %q", name, hold, set, err, tc.hold, tc.set, tc.err)
		}
	}
}
