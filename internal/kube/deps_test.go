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

// TestBridgeLeavesOutTheFunction: the deployed bridge delivers over HTTP
// and never links the proxy-quit function or its exec transports
// (remotecommand, SPDY, WebSocket); only bridge/cmd/allinone does.
func TestBridgeLeavesOutTheFunction(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "../../bridge/cmd/bridge").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "k8s.io/client-go/tools/remotecommand", "k8s.io/client-go/transport/spdy",
			"github.com/istio-aux/istio-aux/functions/proxyquit":
			t.Errorf("bridge/cmd/bridge links %s", dep)
		}
	}
}
