//go:build e2e

package node

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/test/mesh"
)

// worker is the training container (mesh.AppContainer) with APP_*
// settings given directly.
func worker(env map[string]string) corev1.Container {
	c := mesh.AppContainer(mesh.App{})
	for k, v := range env {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
	}
	return c
}

// meshJob is mesh.TrainingJob with the container as given.
func meshJob(name string, n int32, policy corev1.RestartPolicy, app corev1.Container) *batchv1.Job {
	return mesh.TrainingJob(name, n, policy, mesh.App{}, &app)
}
