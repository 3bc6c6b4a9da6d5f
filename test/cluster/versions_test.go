package cluster

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

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

// TestScriptsBuildTheVersionsTheSuitesRun keeps hack/versions.sh, which
// make e2e's scripts build and run, equal to the versions the shapes name.
func TestScriptsBuildTheVersionsTheSuitesRun(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "hack", "versions.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"K8S_OLDEST": K8sV131, "K8S_V132": K8sV132, "K8S_MIXED": K8sV133} {
		m := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`).FindSubmatch(raw)
		if m == nil || string(m[1]) != want {
			t.Errorf("hack/versions.sh: %s=%s, the harness runs %s", name, m, want)
		}
	}
}
