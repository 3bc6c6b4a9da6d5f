package decision_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// kubeletColumns are the kubelets whose own ShouldContainerBeRestarted
// answered testdata/kubelet-restart.json (hack/tools/k8s/kubeletparity,
// run by make e2e against each module file): every minor from the oldest
// istio-aux supports to the newest.
var kubeletColumns = []string{"1.31", "1.32", "1.33", "1.34", "1.35", "1.36"}

// TestWillRestartMatchesTheKubelet replays testdata/kubelet-restart.json,
// whose answers each kubelet's own code wrote: every pod policy, container
// policy, rule list and exit code that reaches a distinct branch of the
// newest kubelet's rule, about a thousand cases, each answered by every
// kubelet from 1.31 to 1.36, against WillRestart for a Kubelet of that
// minor. A kubelet that does not know a field (restartPolicyRules before
// 1.34) read the case without it, as it reads a newer API server's pod;
// WillRestart reads the whole container and must still agree.
func TestWillRestartMatchesTheKubelet(t *testing.T) {
	raw, err := os.ReadFile("testdata/kubelet-restart.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Pod       corev1.RestartPolicy `json:"pod"`
		Container slim.Container       `json:"container"`
		ExitCode  int32                `json:"exitCode"`
		Kubelets  map[string]bool      `json:"kubelets"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 900 {
		t.Fatalf("%d cases: the table lost rows", len(cases))
	}
	differ := 0
	for i, c := range cases {
		answers := map[bool]bool{}
		for _, col := range kubeletColumns {
			want, ok := c.Kubelets[col]
			if !ok {
				t.Fatalf("case %d has no answer of kubelet %s: run hack/tools/k8s/kubeletparity with -update for it", i, col)
			}
			answers[want] = true
			var minor int
			if _, err := fmt.Sscanf(col, "1.%d", &minor); err != nil {
				t.Fatal(err)
			}
			if got := decision.WillRestart(c.Container, c.Pod, c.ExitCode, decision.Kubelet{Minor: minor}) != decision.NoRestart; got != want {
				t.Errorf("case %d: pod %q, container %+v, exit %d: restart %v, kubelet %s says %v", i, c.Pod, c.Container, c.ExitCode, got, col, want)
			}
			// The zero Kubelet is the newest.
			if col == kubeletColumns[len(kubeletColumns)-1] {
				if got := decision.WillRestart(c.Container, c.Pod, c.ExitCode, decision.Kubelet{}) != decision.NoRestart; got != want {
					t.Errorf("case %d: the zero Kubelet says restart %v, the newest (%s) %v", i, got, col, want)
				}
			}
		}
		if len(answers) > 1 {
			differ++
		}
	}
	// The table must tell the kubelets apart, or it proves nothing about
	// versions.
	if differ == 0 {
		t.Error("every kubelet answers every case alike")
	}
	t.Logf("%d cases, %d answered differently by different kubelets", len(cases), differ)
	if !slices.IsSorted(kubeletColumns) {
		t.Error("kubeletColumns out of order")
	}
}
