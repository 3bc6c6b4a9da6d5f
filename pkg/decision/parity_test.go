package decision_test

import (
	"encoding/json"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// TestWillRestartMatchesTheKubelet replays testdata/kubelet-restart.json,
// whose expectations the kubelet's own ContainerShouldRestart wrote
// (hack/tools/k8s/kubeletparity, run by make e2e): every pod policy,
// container policy, rule list and exit code that reaches a distinct branch
// of it, about a thousand cases.
func TestWillRestartMatchesTheKubelet(t *testing.T) {
	raw, err := os.ReadFile("testdata/kubelet-restart.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Pod       corev1.RestartPolicy `json:"pod"`
		Container slim.Container       `json:"container"`
		ExitCode  int32                `json:"exitCode"`
		Restart   bool                 `json:"restart"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 900 {
		t.Fatalf("%d cases: the table lost rows", len(cases))
	}
	for i, c := range cases {
		if got := decision.WillRestart(c.Container, c.Pod, c.ExitCode) != decision.NoRestart; got != c.Restart {
			t.Errorf("case %d: pod %q, container %+v, exit %d: restart %v, the kubelet says %v", i, c.Pod, c.Container, c.ExitCode, got, c.Restart)
		}
	}
}
