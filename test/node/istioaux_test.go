//go:build e2e

package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// The seed's story on real pods (issue 12): the reference demo's Kubeflow
// mnist TFJob, 2 workers, restartPolicy OnFailure, whose app downloads its
// dataset through the proxy at start. Istio's real injector and the real
// pilot-agent run it; only Envoy is a stand-in.

// TestNodeMnistWithoutIstioAux: without istio-aux the app starts before its
// proxy (injected last, no hold), so its download fails and the kubelet
// restarts it; once it has run, the proxy keeps running and both pods stay
// Running at 1/2: the Job never completes.
func TestNodeMnistWithoutIstioAux(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	ns := meshNamespace(t, c, false)
	createJob(t, c, ns, meshJob("mnist", 2, corev1.RestartPolicyOnFailure, worker(map[string]string{"APP_RUN_FOR": "1s"})))
	stuck := func(p *corev1.Pod) bool {
		return mesh.Stuck(p, "tensorflow") && terminated(p, "tensorflow").ExitCode == 0
	}
	var pods []corev1.Pod
	if err := cluster.Poll(context.Background(), 200*time.Millisecond, 2*time.Minute, func(context.Context) (bool, error) {
		pods = jobPods(t, c, ns, "mnist")
		n := 0
		for i := range pods {
			if stuck(&pods[i]) {
				n++
			}
		}
		return n == 2, nil
	}); err != nil {
		t.Fatalf("both workers' apps done with the proxy running: %v", err)
	}
	for _, p := range pods {
		if _, ok := p.Annotations[keys.AnnotationProxyConfig]; ok {
			t.Errorf("%s: mutated outside the opt-in: %s", p.Name, p.Annotations[keys.AnnotationProxyConfig])
		}
		if last := p.Spec.Containers[len(p.Spec.Containers)-1].Name; last != keys.ProxyContainer || mesh.ProxyFirstWithHold(&p) {
			t.Errorf("%s: Istio injected istio-proxy as %v; want it last, with no hold", p.Name, containerNames(&p))
		}
		// The app started before its proxy was ready: its first attempt
		// exited 1 (the download is the app's only way to fail here), and
		// the kubelet ran it again.
		s := status(&p, "tensorflow")
		if last := s.LastTerminationState.Terminated; s.RestartCount < 1 || last == nil || last.ExitCode != 1 {
			t.Errorf("%s: restarts %d, last termination %+v; want a first attempt that failed its download", p.Name, s.RestartCount, s.LastTerminationState)
		}
		if out, _ := kubectl(t, c, "logs", "-n", ns, p.Name, "-c", "tensorflow"); !strings.Contains(out, fmt.Sprintf("app: attempt %d", s.RestartCount+1)) {
			t.Errorf("%s: the last attempt's log:\n%s", p.Name, out)
		}
	}
	for _, p := range pods {
		stays(t, c, ns, p.Name, 3*time.Second, "Running at 1/2 with only istio-proxy running", stuck)
	}
	j, err := c.Client().BatchV1().Jobs(ns).Get(context.Background(), "mnist", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mesh.JobHas(j, batchv1.JobComplete) || j.Status.Succeeded != 0 {
		t.Errorf("the Job completed without istio-aux: %+v", j.Status)
	}
	for _, p := range pods {
		if hasEvent(events(t, c, ns, p.Name), "ProxyQuit") {
			t.Errorf("%s: quit outside the opt-in", p.Name)
		}
	}
}

// TestNodeMnistWithIstioAux: with istio-aux, Istio injects the proxy first
// with its postStart wait (hold), so the app's download works at the first
// attempt; once the app exits, istio-aux quits the proxy through the real
// pilot-agent, both pods Succeed, the Job completes, each pod has its
// ProxyQuit Event and `kubectl logs` shows the app's own output. The test
// logs the timeline the README shows.
func TestNodeMnistWithIstioAux(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	ns := meshNamespace(t, c, true)
	start := time.Now()
	createJob(t, c, ns, meshJob("mnist", 2, corev1.RestartPolicyOnFailure, worker(map[string]string{"APP_RUN_FOR": "3s"})))
	tl := watchTimeline(t, c, ns, "mnist", 3*time.Minute)
	j := waitJob(t, c, ns, "mnist", batchv1.JobComplete, 3*time.Minute)
	if j.Status.Succeeded != 2 {
		t.Errorf("succeeded %d, want 2", j.Status.Succeeded)
	}
	pods := jobPods(t, c, ns, "mnist")
	if len(pods) != 2 {
		t.Fatalf("%d pods, want 2", len(pods))
	}
	for _, p := range pods {
		if !strings.Contains(p.Annotations[keys.AnnotationProxyConfig], "holdApplicationUntilProxyStarts: true") {
			t.Errorf("%s: %s = %q, want the hold", p.Name, keys.AnnotationProxyConfig, p.Annotations[keys.AnnotationProxyConfig])
		}
		if !mesh.ProxyFirstWithHold(&p) {
			t.Errorf("%s: containers %v: Istio did not put istio-proxy first with its postStart wait", p.Name, containerNames(&p))
		}
		app := status(&p, "tensorflow")
		if app.RestartCount != 0 || app.State.Terminated == nil || app.State.Terminated.ExitCode != 0 {
			t.Errorf("%s: app %+v; want its first attempt to succeed", p.Name, app.State)
		}
		if s := terminated(&p, keys.ProxyContainer); s == nil || s.ExitCode != 0 {
			t.Errorf("%s: istio-proxy %+v, want it quit with exit 0", p.Name, status(&p, keys.ProxyContainer).State)
		}
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("%s: phase %s", p.Name, p.Status.Phase)
		}
		waitEvent(t, c, ns, p.Name, "ProxyQuit")
		out, code := kubectl(t, c, "logs", "-n", ns, p.Name, "-c", "tensorflow")
		for _, line := range []string{"app: attempt 1", "app: dataset downloaded", "app: epoch 3/3 done", "app: exiting with 0"} {
			if code != 0 || !strings.Contains(out, line) {
				t.Errorf("%s: kubectl logs lacks %q:\n%s", p.Name, line, out)
			}
		}
	}
	tl.log(t, start)
}

// TestNodeNeverFailingApp: restartPolicy Never and an app exiting 1: the
// kubelet will not run it again, so the proxy is quit, the pod fails and
// the Job counts the failure.
func TestNodeNeverFailingApp(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	ns := meshNamespace(t, c, true)
	j := meshJob("failing", 1, corev1.RestartPolicyNever, worker(map[string]string{"APP_EXIT_CODES": "1"}))
	j.Spec.BackoffLimit = new(int32)
	createJob(t, c, ns, j)
	waitJob(t, c, ns, "failing", batchv1.JobFailed, 3*time.Minute)
	p := onlyPod(t, c, ns, "failing")
	if p.Status.Phase != corev1.PodFailed {
		t.Errorf("phase %s, want Failed", p.Status.Phase)
	}
	if s := terminated(&p, keys.ProxyContainer); s == nil || s.ExitCode != 0 {
		t.Errorf("istio-proxy %+v, want quit (exit 0)", status(&p, keys.ProxyContainer).State)
	}
	waitEvent(t, c, ns, p.Name, "ProxyQuit")
}

// TestNodeOnFailureRetryKeepsProxy: restartPolicy OnFailure, the app's
// first attempt exits 1: the kubelet runs it again, and the retry still has
// its proxy (its download works); the proxy is quit after the retry
// succeeded, and the Job completes.
func TestNodeOnFailureRetryKeepsProxy(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	ns := meshNamespace(t, c, true)
	createJob(t, c, ns, meshJob("retry", 1, corev1.RestartPolicyOnFailure, worker(map[string]string{"APP_EXIT_CODES": "1,0"})))
	waitJob(t, c, ns, "retry", batchv1.JobComplete, 3*time.Minute)
	checkRetried(t, c, ns, "retry")
}

// checkRetried: the Job's pod ran its app twice, the second attempt with a
// working network, and its proxy was quit once, after that.
func checkRetried(t *testing.T, c *cluster.Cluster, ns, job string) {
	t.Helper()
	p := onlyPod(t, c, ns, job)
	app := status(&p, "tensorflow")
	if app.RestartCount != 1 || app.State.Terminated == nil || app.State.Terminated.ExitCode != 0 {
		t.Errorf("app: restarts %d, state %+v; want one retry that exited 0", app.RestartCount, app.State)
	}
	if s := status(&p, keys.ProxyContainer); s.RestartCount != 0 || s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
		t.Errorf("istio-proxy: %+v; want it quit once, at the end", s)
	}
	out, _ := kubectl(t, c, "logs", "-n", ns, p.Name, "-c", "tensorflow")
	if !strings.Contains(out, "app: attempt 2") || !strings.Contains(out, "app: dataset downloaded") {
		t.Errorf("the retry did not download through its proxy:\n%s", out)
	}
	if n := countEvents(events(t, c, ns, p.Name), "ProxyQuit"); n != 1 {
		t.Errorf("%d ProxyQuit Events, want 1", n)
	}
}

// TestNodeNotOptedInLeftAlone: outside the opt-in, nothing is mutated and
// nothing is quit, whatever the pod does (TestNodeMnistWithoutIstioAux has
// the long form; this one checks a Never pod that finished).
func TestNodeNotOptedInLeftAlone(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	ns := meshNamespace(t, c, false)
	app := worker(map[string]string{"APP_NEEDS_NETWORK": "false"})
	createJob(t, c, ns, meshJob("untouched", 1, corev1.RestartPolicyNever, app))
	var p corev1.Pod
	if err := cluster.Poll(context.Background(), 200*time.Millisecond, 2*time.Minute, func(context.Context) (bool, error) {
		pods := jobPods(t, c, ns, "untouched")
		if len(pods) != 1 {
			return false, nil
		}
		p = pods[0]
		return terminated(&p, "tensorflow") != nil && running(&p, keys.ProxyContainer), nil
	}); err != nil {
		t.Fatal(err)
	}
	stays(t, c, ns, p.Name, 3*time.Second, "the proxy still running", func(p *corev1.Pod) bool { return running(p, keys.ProxyContainer) })
	if _, ok := p.Annotations[keys.AnnotationProxyConfig]; ok || hasEvent(events(t, c, ns, p.Name), "ProxyQuit") {
		t.Errorf("a pod outside the opt-in was mutated or quit: %v", p.Annotations)
	}
}

func onlyPod(t *testing.T, c *cluster.Cluster, ns, job string) corev1.Pod {
	t.Helper()
	pods := jobPods(t, c, ns, job)
	if len(pods) != 1 {
		t.Fatalf("job %s: %d pods, want 1", job, len(pods))
	}
	return pods[0]
}

func countEvents(evs []corev1.Event, reason string) int32 {
	var n int32
	for _, e := range evs {
		if e.Reason == reason {
			n += max(e.Count, 1)
		}
	}
	return n
}

func containerNames(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.InitContainers {
		out = append(out, "init:"+c.Name)
	}
	for _, c := range p.Spec.Containers {
		out = append(out, c.Name)
	}
	return out
}

// timeline is when the test first saw each step of the story, per pod.
type timeline struct{ steps []step }

type step struct {
	at   time.Time
	what string
}

// watchTimeline polls the Job's pods, their Events and the Job every 50 ms
// until the Job completes or timeout passes, noting when each step was
// first seen. The app's exit is the kubelet's own finishedAt (whole
// seconds); the rest are when the API showed them.
func watchTimeline(t *testing.T, c *cluster.Cluster, ns, job string, timeout time.Duration) *timeline {
	t.Helper()
	tl := &timeline{}
	seen := map[string]bool{}
	note := func(key string, at time.Time, what string) {
		if !seen[key] {
			seen[key] = true
			tl.steps = append(tl.steps, step{at, what})
		}
	}
	ctx := context.Background()
	_ = cluster.Poll(ctx, 50*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		for _, p := range jobPods(t, c, ns, job) {
			if s := terminated(&p, "tensorflow"); s != nil && s.ExitCode == 0 {
				note(p.Name+"/app", s.FinishedAt.Time, fmt.Sprintf("pod %s: app exited 0 (kubelet's finishedAt)", p.Name))
			}
			if hasEvent(events(t, c, ns, p.Name), "ProxyQuit") {
				note(p.Name+"/quit", time.Now(), fmt.Sprintf("pod %s: ProxyQuit Event", p.Name))
			}
			if p.Status.Phase == corev1.PodSucceeded {
				note(p.Name+"/done", time.Now(), fmt.Sprintf("pod %s: Succeeded", p.Name))
			}
		}
		j, err := c.Client().BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if mesh.JobHas(j, batchv1.JobComplete) {
			note("job", time.Now(), fmt.Sprintf("job %s: Complete", job))
			return true, nil
		}
		return false, nil
	})
	return tl
}

func (tl *timeline) log(t *testing.T, start time.Time) {
	t.Helper()
	var b strings.Builder
	steps := slices.Clone(tl.steps)
	slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	for _, s := range steps {
		fmt.Fprintf(&b, "\n  %s  +%6.2fs  %s", s.at.Format("15:04:05.000"), s.at.Sub(start).Seconds(), s.what)
	}
	t.Logf("timeline (job created at %s):%s", start.Format("15:04:05.000"), b.String())
}
