//go:build e2e

package node

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// meshNamespace creates the test's namespace with Istio's injection on
// and, if optedIn, istio-aux's label.
func meshNamespace(t *testing.T, c *cluster.Cluster, optedIn bool) string {
	t.Helper()
	var labels map[string]string
	if optedIn {
		labels = mesh.OptedIn
	}
	return mesh.Namespace(t, c.Client(), mesh.NameFor(t, ""), true, labels)
}

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

func createJob(t *testing.T, c *cluster.Cluster, ns string, j *batchv1.Job) {
	t.Helper()
	if _, err := c.Client().BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func jobPods(t *testing.T, c *cluster.Cluster, ns, job string) []corev1.Pod {
	t.Helper()
	pods, err := mesh.JobPods(context.Background(), c.Client(), ns, job)
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

// waitJob waits for the Job's condition (Complete or Failed).
func waitJob(t *testing.T, c *cluster.Cluster, ns, name string, cond batchv1.JobConditionType, timeout time.Duration) *batchv1.Job {
	t.Helper()
	var last *batchv1.Job
	err := cluster.Poll(context.Background(), 100*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		j, err := c.Client().BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = j
		return mesh.JobHas(j, cond), nil
	})
	if err != nil {
		pods := jobPods(t, c, ns, name)
		var states []string
		for _, p := range pods {
			states = append(states, p.Name+": "+string(p.Status.Phase)+" "+describe(p.Status.ContainerStatuses))
		}
		t.Fatalf("job %s/%s not %s: %v; status %+v; pods: %s", ns, name, cond, err, last.Status, strings.Join(states, "; "))
	}
	return last
}

// events are the reasons of the Kubernetes Events on a pod.
func events(t *testing.T, c *cluster.Cluster, ns, pod string) []corev1.Event {
	t.Helper()
	l, err := c.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func hasEvent(evs []corev1.Event, reason string) bool {
	for _, e := range evs {
		if e.Reason == reason {
			return true
		}
	}
	return false
}

// waitEvent waits until the pod has an Event with the reason.
func waitEvent(t *testing.T, c *cluster.Cluster, ns, pod, reason string) {
	t.Helper()
	if err := cluster.Poll(context.Background(), 100*time.Millisecond, 30*time.Second, func(context.Context) (bool, error) {
		return hasEvent(events(t, c, ns, pod), reason), nil
	}); err != nil {
		t.Fatalf("no %s Event on %s/%s: %v", reason, ns, pod, err)
	}
}
