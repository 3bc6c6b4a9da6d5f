package cluster

import "testing"

// TestK8sVersionsMatchTheirModuleFiles keeps every Kubernetes version the
// harness runs equal to what its module file in hack/tools/k8s requires,
// which is what hack/build-k8s.sh builds and caches it under.
func TestK8sVersionsMatchTheirModuleFiles(t *testing.T) {
	for _, v := range K8sVersions {
		file := K8sModFile(v)
		got, err := ToolsVersionIn("k8s", file, "k8s.io/kubernetes")
		if err != nil || got != v {
			t.Errorf("hack/tools/k8s/%s requires k8s.io/kubernetes %s (%v), the harness runs %s", file, got, err, v)
		}
	}
}
