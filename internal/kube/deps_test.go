package kube_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestFunctionLeavesOutTheClientset holds the reason this package exists:
// the function must not link client-go's clientset, whose init registers
// every API group (6 MiB more RSS per process, measured on 2026-11-26; 12 MB
// more binary). The bridge links it since it stands for a Lease: client-go's
// leader election is written on the clientset, and a hand-written election
// is not worth 6 MiB (docs/design.md, "Many nodes"). It still watches and
// reads through this package.
func TestFunctionLeavesOutTheClientset(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, cmd := range []string{"../../functions/proxyquit/cmd/proxyquit"} {
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
