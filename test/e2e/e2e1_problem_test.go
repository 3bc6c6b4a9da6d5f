//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/mesh"
	corev1 "k8s.io/api/core/v1"
)

// Test1ProblemWithoutIstioAux reproduces the reference demo's bug: with an
// Istio sidecar and nothing to stop it, both workers' apps finish but the
// pods stay Running (1/2) and the Job never completes.
func Test1ProblemWithoutIstioAux(t *testing.T) {
	ns := namespace(t, nil)
	createJob(t, ns, trainingJob("mnist", corev1.RestartPolicyOnFailure, mesh.App{RunFor: "1s"}))
	eventually(t, 30*time.Second, "both workers stuck with only istio-proxy running", func(ctx context.Context) (bool, error) {
		pods := jobPods(t, ns, "mnist")
		n := 0
		for i := range pods {
			if stuck(&pods[i]) {
				n++
			}
		}
		return n == 2, nil
	})
	consistently(t, 5*time.Second, "job incomplete, pods stuck", func(ctx context.Context) (bool, error) {
		j, err := getJob(ctx, ns, "mnist")
		if err != nil {
			return false, err
		}
		pods := jobPods(t, ns, "mnist")
		return j.Status.Succeeded == 0 && !mesh.JobHas(j, "Complete") && len(pods) == 2 && stuck(&pods[0]) && stuck(&pods[1]), nil
	})
	if q := quitsIn(t, ns); len(q) != 0 {
		t.Errorf("quits without istio-aux: %+v", q)
	}
}
