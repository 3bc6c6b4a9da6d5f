package config

import (
	"fmt"
	"testing"

	k8sversion "k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"knative.dev/pkg/version"

	"github.com/istio-aux/istio-aux/pkg/versions"
	"github.com/istio-aux/istio-aux/test/cluster"
)

// TestWebhookStartsOnExactlyTheProvenVersions: the KUBERNETES_MIN_VERSION
// every shipped webhook Deployment sets is pkg/versions' floor, and
// knative.dev/pkg's own start-up check, with that value, accepts every
// Kubernetes the harness runs (cluster.K8sVersions) and refuses the
// release before the oldest.
func TestWebhookStartsOnExactlyTheProvenVersions(t *testing.T) {
	found := 0
	for _, d := range allDocs(t) {
		if d.obj.GetKind() != "Deployment" || d.obj.GetName() != "istio-aux-webhook" {
			continue
		}
		_, containers, _ := workload(d)
		for _, c := range containers {
			env, _ := c["env"].([]any)
			for _, e := range env {
				if m, _ := e.(map[string]any); m["name"] == version.KubernetesMinVersionKey {
					found++
					if m["value"] != versions.MinKubernetes {
						t.Errorf("%s: %s=%v, want %s", d, version.KubernetesMinVersionKey, m["value"], versions.MinKubernetes)
					}
				}
			}
		}
	}
	if found == 0 {
		t.Fatalf("no webhook Deployment sets %s", version.KubernetesMinVersionKey)
	}
	t.Setenv(version.KubernetesMinVersionKey, versions.MinKubernetes)
	check := func(v string) error {
		d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}, FakedServerVersion: &k8sversion.Info{GitVersion: v}}
		return version.CheckMinimumVersion(d)
	}
	for _, v := range cluster.K8sVersions {
		if err := check(v); err != nil {
			t.Errorf("the harness runs %s, which the webhook refuses: %v", v, err)
		}
	}
	older := fmt.Sprintf("v1.%d.14", versions.OldestMinor-1)
	if err := check(older); err == nil {
		t.Errorf("the webhook starts on %s, older than anything the suites prove", older)
	}
	// The range is exactly what the harness runs: its ends are run.
	lo, hi := 99, 0
	for _, v := range cluster.K8sVersions {
		if ok, err := versions.Proven(v); !ok || err != nil {
			t.Errorf("the harness runs %s, outside pkg/versions' range %s (%v)", v, versions.Range, err)
		}
		var minor int
		if _, err := fmt.Sscanf(v, "v1.%d.", &minor); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		lo, hi = min(lo, minor), max(hi, minor)
	}
	if lo != versions.OldestMinor || hi != versions.NewestMinor {
		t.Errorf("the harness runs 1.%d to 1.%d, pkg/versions claims %s", lo, hi, versions.Range)
	}
}
