package proxyquit

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
)

// TestDecidesAsThePodsKubelet: an app with a restart policy of its own
// (here Never, under the pod's OnFailure) that exited 1 is run again by a
// kubelet older than 1.35, which reads the pod's policy alone: on a 1.33
// node the function waits; on a 1.36 node, where the app's own Never
// holds, it quits. The Node is read only for such a pod.
func TestDecidesAsThePodsKubelet(t *testing.T) {
	never := corev1.ContainerRestartPolicyNever
	own := func(name, node string) *corev1.Pod {
		p := podSpec{name: name, uid: name + "-uid", policy: corev1.RestartPolicyOnFailure, apps: []string{"app"},
			states: map[string]corev1.ContainerState{"app": exited(1)}, proxy: running}.pod()
		p.Spec.Containers[1].RestartPolicy = &never
		p.Spec.NodeName = node
		return p
	}
	plain := donePod("plain", "plain-uid")
	plain.Spec.NodeName = "old"
	for _, tc := range []struct {
		pod       *corev1.Pod
		want      Outcome
		nodeReads int
	}{
		{own("on-old", "old"), OutcomeWait, 1},
		{own("on-new", "new"), OutcomeQuit, 1},
		{own("on-gone", "gone"), OutcomeQuit, 1}, // a node that is gone: the newest kubelet's answer
		{plain, OutcomeQuit, 0},
	} {
		t.Run(tc.pod.Name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig(), optedIn, tc.pod)
			for name, v := range map[string]string{"old": "v1.33.13", "new": "v1.36.3"} {
				n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: v}}}
				if _, err := h.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			h.client.ClearActions()
			e := newEvent(t, tc.pod)
			if code := codeOf(t, h.fn.Handle(context.Background(), e)); code != 200 {
				t.Fatalf("code %d", code)
			}
			if got := h.count(e.Type(), tc.want); got != 1 {
				t.Errorf("outcome %s counted %v times, want once; events %v", tc.want, got, h.events())
			}
			reads := 0
			for _, a := range h.client.Actions() {
				if a.Matches("get", "nodes") {
					reads++
					if a.(k8stesting.GetAction).GetName() != tc.pod.Spec.NodeName {
						t.Errorf("read node %s, want the pod's, %s", a.(k8stesting.GetAction).GetName(), tc.pod.Spec.NodeName)
					}
				}
			}
			if reads != tc.nodeReads {
				t.Errorf("%d reads of the node, want %d", reads, tc.nodeReads)
			}
			if quits := len(h.exec.Calls()); (quits == 1) != (tc.want == OutcomeQuit) {
				t.Errorf("%d quits, want outcome %s", quits, tc.want)
			}
		})
	}
}
