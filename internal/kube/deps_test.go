package kube_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinariesLeaveOutTheClientset holds the reason this package exists:
// the bridge and the function must not link client-go's clientset, whose
// init registers every API group (about 8 MiB of RSS per process).
func TestBinariesLeaveOutTheClientset(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, cmd := range []string{"../../bridge/cmd/bridge", "../../functions/proxyquit/cmd/proxyquit"} {
		out, err := exec.Command("go", "list", "-deps", cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", cmd, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			switch {
			case dep == "k8s.io/client-go/kubernetes", dep == "k8s.io/client-go/kubernetes/scheme",
				dep == "k8s.io/client-go/informers", strings.HasPrefix(dep, "k8s.io/api/apps/"):
				t.Errorf("%s links %s", cmd, dep)
			}
		}
	}
}
