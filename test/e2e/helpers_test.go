//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// namespace creates a fresh namespace with Istio injection and the given
// extra labels, deleted after the test.
func namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), time.Now().UnixNano()%100000)
	if len(name) > 63 {
		name = name[len(name)-63:]
	}
	if err := mesh.CreateNamespace(context.Background(), env.Client(), name, labels); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client().CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// trainingJob is the reference demo's shape: a 2-worker job whose one app
// container runs for runFor and exits with exitCodes per attempt.
func trainingJob(name string, policy corev1.RestartPolicy, runFor, exitCodes string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			Completions:  ptr.To(int32(2)),
			Parallelism:  ptr.To(int32(2)),
			BackoffLimit: ptr.To(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
					cluster.AnnotationRunFor:    runFor,
					cluster.AnnotationExitCodes: exitCodes,
				}},
				Spec: corev1.PodSpec{
					// Set by the ServiceAccount admission plugin on a real
					// cluster; istiod's injected token volume needs it.
					ServiceAccountName: istio.ServiceAccount,
					RestartPolicy:      policy,
					Containers: []corev1.Container{{
						Name: "tensorflow", Image: "kubeflow/tf-mnist", Command: []string{"python", "-u", "mnist.py"},
					}},
				},
			},
		},
	}
}

// createOnePodJob creates a one-pod trainingJob whose app runs for runFor
// and exits 0, never retried.
func createOnePodJob(t *testing.T, ns, name, runFor string) {
	t.Helper()
	job := trainingJob(name, corev1.RestartPolicyNever, runFor, "0")
	job.Spec.Completions, job.Spec.Parallelism = ptrInt32(1), ptrInt32(1)
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
	deadline := time.Now().Add(period)
	for time.Now().Before(deadline) {
		ok, err := cond(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !ok {
			t.Fatalf("%s: stopped holding", what)
		}
		select {
		case <-time.After(250 * time.Millisecond):
		}
	}
}

var containerStatus = cluster.ContainerStatus

// stuck is the reference's symptom: the app has terminated, istio-proxy
// still runs, the pod stays Running at 1/2.
func stuck(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning &&
		containerStatus(p, "tensorflow").State.Terminated != nil &&
		containerStatus(p, "istio-proxy").State.Running != nil
}

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

func ptrInt32(v int32) *int32 { return &v }

func batchCondition(s string) batchv1.JobConditionType { return batchv1.JobConditionType(s) }
