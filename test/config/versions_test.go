//go:build e2e

package config

import (
	"testing"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// apiVersion is the Kubernetes version of the API servers the tests start
// ("" the newest); TestV132 and TestV133 set it for their subtests.
var apiVersion string

// TestV131, TestV132 and TestV133 run config/'s checks that need an API server
// against each older Kubernetes the suites prove, the very tests the newest
// runs at the top level: every manifest dry-run with the real Knative CRDs,
// each component's RBAC and each under its own ServiceAccount, the exec
// policies (ValidatingAdmissionPolicy with CEL's optionals and
// namespaceObject, on CONNECT of pods/exec, over WebSocket and SPDY), and
// the webhook's selectors and matchConditions.
func TestV131(t *testing.T) { onVersion(t, cluster.K8sV131) }

func TestV132(t *testing.T) { onVersion(t, cluster.K8sV132) }

func TestV133(t *testing.T) { onVersion(t, cluster.K8sV133) }

func onVersion(t *testing.T, v string) {
	apiVersion = v
	t.Cleanup(func() { apiVersion = "" })
	for _, tc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"DryRun", TestDryRun},
		{"RBAC", TestRBAC},
		{"WebhookRunsWithItsRole", TestWebhookRunsWithItsRole},
		{"BridgeRunsWithItsRole", TestBridgeRunsWithItsRole},
		{"ExecPolicy", TestExecPolicy},
		{"DeletePolicy", TestDeletePolicy},
	} {
		t.Run(tc.name, tc.run)
	}
}
