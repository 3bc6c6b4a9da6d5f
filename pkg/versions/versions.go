// Package versions names the Kubernetes releases istio-aux is proven on:
// the oldest and the newest minor its end-to-end suites run (the README's
// compatibility matrix). The webhook's KUBERNETES_MIN_VERSION in config/ is
// the oldest (knative.dev/pkg refuses to start on anything older), and
// kubectl istio-aux check warns about an API server or a kubelet outside
// the range.
package versions

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"
)

// The Kubernetes minors (1.x) the suites prove, oldest and newest; every
// minor between them is within the skew the suites run.
const (
	OldestMinor = 31
	NewestMinor = 36
)

// MinKubernetes is the oldest Kubernetes istio-aux starts on, as
// knative.dev/pkg's KUBERNETES_MIN_VERSION reads it.
var MinKubernetes = fmt.Sprintf("v1.%d.0", OldestMinor)

// Range is the proven range in words ("1.31 to 1.36").
var Range = fmt.Sprintf("1.%d to 1.%d", OldestMinor, NewestMinor)

// Proven reports whether a Kubernetes version, as a server or a kubelet
// reports it ("v1.33.13", "v1.32.9-eks-1234abc"), is within the range the
// suites prove. An unreadable version is not.
func Proven(v string) (bool, error) {
	parsed, err := version.ParseGeneric(v)
	if err != nil {
		return false, fmt.Errorf("reading Kubernetes version %q: %w", v, err)
	}
	minor := int(parsed.Minor())
	return parsed.Major() == 1 && minor >= OldestMinor && minor <= NewestMinor, nil
}
