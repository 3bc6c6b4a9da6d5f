//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/mesh"
)

var optedIn = map[string]string{keys.LabelEnabled: "true"}

// Test2JobCompletes: with istio-aux, pods get the hold annotation at
// creation (so the injector puts istio-proxy first), the Job completes, its
// pods end Succeeded and each has a ProxyQuit Event.
func Test2JobCompletes(t *testing.T) {
	withIstioAux(t)
	ns := namespace(t, optedIn)
	createJob(t, ns, trainingJob("mnist", corev1.RestartPolicyOnFailure, mesh.App{RunFor: "1s"}))
	waitJob(t, ns, "mnist", "Complete", 60*time.Second)
	pods := jobPods(t, ns, "mnist")
	if len(pods) != 2 {
		t.Fatalf("%d pods, want 2", len(pods))
	}
	for _, p := range pods {
		if !strings.Contains(p.Annotations["proxy.istio.io/config"], "holdApplicationUntilProxyStarts: true") {
			t.Errorf("%s: proxy.istio.io/config = %q, want the hold setting", p.Name, p.Annotations["proxy.istio.io/config"])
		}
		if p.Spec.Containers[0].Name != "istio-proxy" {
			t.Errorf("%s: first container %s: the injector did not see the hold annotation", p.Name, p.Spec.Containers[0].Name)
		}
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("%s: phase %s, want Succeeded", p.Name, p.Status.Phase)
		}
		waitEvent(t, ns, p.Name, "ProxyQuit")
	}
	// quitquitquit is idempotent, so a repeat (an event for the pod seen
	// before its proxy stopped) is harmless; a pod never quit is not.
	quit := map[string]bool{}
	for _, q := range quitsIn(t, ns) {
		quit[q.Name] = true
	}
	for _, p := range pods {
		if !quit[p.Name] {
			t.Errorf("%s: no quit recorded", p.Name)
		}
	}
}

// Test3NeverFailingApp: restartPolicy Never and an app exiting 1: the proxy
// is quit anyway (the app will not be retried), the pod ends Failed and the
// Job counts the failure.
func Test3NeverFailingApp(t *testing.T) {
	withIstioAux(t)
	ns := namespace(t, optedIn)
	job := trainingJob("failing", corev1.RestartPolicyNever, mesh.App{RunFor: "1s", ExitCodes: []int{1}})
	job.Spec.Completions, job.Spec.Parallelism = ptr.To(int32(1)), ptr.To(int32(1))
	createJob(t, ns, job)
	waitJob(t, ns, "failing", "Failed", 60*time.Second)
	j, err := getJob(context.Background(), ns, "failing")
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.Failed != 1 {
		t.Errorf("job failed = %d, want 1", j.Status.Failed)
	}
	pods := jobPods(t, ns, "failing")
	if len(pods) != 1 || pods[0].Status.Phase != corev1.PodFailed {
		t.Fatalf("pods = %v, want one Failed", phases(pods))
	}
	if s := containerStatus(&pods[0], "istio-proxy"); s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
		t.Errorf("istio-proxy %+v, want quit (exit 0)", s.State)
	}
}

// Test4OnFailureRetry: restartPolicy OnFailure with a failing first
// attempt: istio-aux waits while the kubelet retries, and quits only after
// the app succeeded. (A premature quit shows: the kwok Stages make an app
// restarted without its proxy fail for ever, so the Job could not complete.)
func Test4OnFailureRetry(t *testing.T) {
	withIstioAux(t)
	ns := namespace(t, optedIn)
	job := trainingJob("retry", corev1.RestartPolicyOnFailure, mesh.App{RunFor: "1s", ExitCodes: []int{1, 0}})
	job.Spec.Completions, job.Spec.Parallelism = ptr.To(int32(1)), ptr.To(int32(1))
	job.Spec.BackoffLimit = ptr.To(int32(3))
	createJob(t, ns, job)
	waitJob(t, ns, "retry", "Complete", 60*time.Second)
	pods := jobPods(t, ns, "retry")
	if len(pods) != 1 {
		t.Fatalf("%d pods, want 1", len(pods))
	}
	app := containerStatus(&pods[0], "tensorflow")
	if app.RestartCount != 1 || app.State.Terminated == nil || app.State.Terminated.ExitCode != 0 {
		t.Errorf("app = restarts %d, state %+v; want one retry that exited 0", app.RestartCount, app.State)
	}
	quits := quitsIn(t, ns)
	if len(quits) == 0 {
		t.Fatal("no quit recorded")
	}
	// Pod times have whole seconds; a quit between the failure and the
	// retry within one second is caught by the Job not completing instead.
	for _, q := range quits {
		if started := app.State.Terminated.StartedAt.Time; q.Time.Before(started) {
			t.Errorf("quit at %s, before the successful attempt started at %s", q.Time, started)
		}
	}
}

// Test5MissedWhileDown: pods that finished while the bridge was stopped are
// handled once it is back (a resync/list, not only watch updates).
func Test5MissedWhileDown(t *testing.T) {
	a := withIstioAux(t)
	if err := a.StopBridge(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = a.StartBridge()
		}
	})
	ns := namespace(t, optedIn)
	createJob(t, ns, trainingJob("offline", corev1.RestartPolicyOnFailure, mesh.App{RunFor: "1s"}))
	eventually(t, 30*time.Second, "both workers done while the bridge is down", func(ctx context.Context) (bool, error) {
		pods := jobPods(t, ns, "offline")
		return len(pods) == 2 && stuck(&pods[0]) && stuck(&pods[1]), nil
	})
	restarted = true
	if err := a.StartBridge(); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ns, "offline", "Complete", 60*time.Second)
}

// Test6NotOptedIn: a pod in a namespace that is not opted in is neither
// mutated nor quit.
func Test6NotOptedIn(t *testing.T) {
	withIstioAux(t)
	ns := namespace(t, nil)
	createOnePodJob(t, ns, "untouched", "1s")
	waitStuck(t, ns, "untouched")
	consistently(t, 5*time.Second, "pod left alone", func(ctx context.Context) (bool, error) {
		pods := jobPods(t, ns, "untouched")
		return len(pods) == 1 && stuck(&pods[0]) && len(quitsIn(t, ns)) == 0, nil
	})
	p := jobPods(t, ns, "untouched")[0]
	if v, ok := p.Annotations["proxy.istio.io/config"]; ok {
		t.Errorf("pod mutated: proxy.istio.io/config = %q", v)
	}
}

func waitJob(t *testing.T, ns, name, condition string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "job "+name+" "+condition, func(ctx context.Context) (bool, error) {
		j, err := getJob(ctx, ns, name)
		if err != nil {
			return false, err
		}
		return mesh.JobHas(j, batchCondition(condition)), nil
	})
}

func waitEvent(t *testing.T, ns, pod, reason string) {
	t.Helper()
	eventually(t, 20*time.Second, reason+" event on "+pod, func(ctx context.Context) (bool, error) {
		l, err := env.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason,
		})
		if err != nil {
			return false, err
		}
		return len(l.Items) > 0, nil
	})
}

func phases(pods []corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name + "=" + string(p.Status.Phase)
	}
	return out
}
