package realnode

import (
	"testing"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// TestCoreDNSVersionMatchesTools keeps CoreDNSVersion equal to what
// hack/tools/coredns pins (and hack/build-coredns.sh therefore builds).
func TestCoreDNSVersionMatchesTools(t *testing.T) {
	v, err := cluster.ToolsVersion("coredns", "github.com/coredns/coredns")
	if err != nil {
		t.Fatal(err)
	}
	if v != CoreDNSVersion {
		t.Errorf("hack/tools/coredns requires %s, CoreDNSVersion is %s", v, CoreDNSVersion)
	}
}
