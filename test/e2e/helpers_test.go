//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// namespace creates a fresh namespace with Istio injection and the given
// extra labels, deleted after the test (the kwok suites share a cluster).
func namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	name := mesh.Namespace(t, env.Client(), mesh.NameFor(t, fmt.Sprintf("-%d", time.Now().UnixNano()%100000)), true, labels)
	t.Cleanup(func() {
		_ = env.Client().CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// trainingJob is the reference demo's 2 workers (mesh.TrainingJob) as the
// kwok Stages run them, with no retries unless the test sets a limit.
func trainingJob(name string, policy corev1.RestartPolicy, app mesh.App) *batchv1.Job {
	j := mesh.TrainingJob(name, 2, policy, app, nil)
	j.Spec.BackoffLimit = ptr.To(int32(0))
	return j
}

// createOnePodJob creates a one-pod trainingJob whose app runs for runFor
// and exits 0, never retried.
func createOnePodJob(t *testing.T, ns, name, runFor string) {
	t.Helper()
	job := trainingJob(name, corev1.RestartPolicyNever, mesh.App{RunFor: runFor})
	job.Spec.Completions, job.Spec.Parallelism = ptr.To(int32(1)), ptr.To(int32(1))
	createJob(t, ns, job)
}

// waitStuck waits for the one pod of Job name to be stuck: app done, proxy
// running.
func waitStuck(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, 30*time.Second, "app done, proxy running", func(ctx context.Context) (bool, error) {
		pods := jobPods(t, ns, name)
		return len(pods) == 1 && stuck(&pods[0]), nil
	})
}

func createJob(t *testing.T, ns string, job *batchv1.Job) *batchv1.Job {
	t.Helper()
	j, err := env.Client().BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func jobPods(t *testing.T, ns, job string) []corev1.Pod {
	t.Helper()
	pods, err := mesh.JobPods(context.Background(), env.Client(), ns, job)
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := cluster.Poll(context.Background(), 200*time.Millisecond, timeout, cond); err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}

// consistently checks that cond holds at every poll for the whole period:
// how a test shows that something does NOT happen within a bound.
func consistently(t *testing.T, period time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := cluster.Consistently(context.Background(), 250*time.Millisecond, period, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

var containerStatus = cluster.ContainerStatus

// stuck is the reference's symptom: the app has terminated, istio-proxy
// still runs, the pod stays Running at 1/2.
func stuck(p *corev1.Pod) bool { return mesh.Stuck(p, "tensorflow") }

func getJob(ctx context.Context, ns, name string) (*batchv1.Job, error) {
	return env.Client().BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
}

func quitsIn(t *testing.T, ns string) []cluster.Quit {
	t.Helper()
	all, err := env.Quits()
	if err != nil {
		t.Fatal(err)
	}
	var out []cluster.Quit
	for _, q := range all {
		if q.Namespace == ns {
			out = append(out, q)
		}
	}
	return out
}

func batchCondition(s string) batchv1.JobConditionType { return batchv1.JobConditionType(s) }
