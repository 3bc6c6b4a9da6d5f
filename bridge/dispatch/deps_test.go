package dispatch_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestForwardsWithoutDecoding holds the dispatcher to forwarding: it reads
// the CloudEvent envelope to send it on, and never decodes the pod inside,
// which the function decodes (and answers with 400 if it cannot). The
// dispatcher's imports leave the event contract's decoder out.
func TestForwardsWithoutDecoding(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "github.com/istio-aux/istio-aux/pkg/podevent", "github.com/istio-aux/istio-aux/pkg/slim":
			t.Errorf("bridge/dispatch links %s", dep)
		}
	}
}
