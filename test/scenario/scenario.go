// Package scenario holds the behaviours that run on both kinds of node,
// written once: kwok's simulated node (test/e2e) and a real kubelet
// (test/node). A suite gives a Target; a scenario makes the reference
// demo's training Job in a namespace of its own and checks what a user
// sees: the Job's condition, the pods' phases and containers, the
// ProxyQuit Events. Where a real kubelet shows more (the app's download
// through its proxy, its logs), Target.Real adds those checks.
package scenario

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
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// Target is where a scenario runs.
type Target struct {
	Cluster *cluster.Cluster
	// Real: a real kubelet runs the pods; the apps download through their
	// proxy and write logs.
	Real bool
	// Timeout bounds a Job's end (and an app's).
	Timeout time.Duration
	// StopBridge stops istio-aux's watcher; start brings it back.
	StopBridge func(t testing.TB) (start func() error)
}

// App is the training container's name, as in the reference demo.
const App = "tensorflow"

func (tg Target) namespace(t testing.TB, optedIn bool) string {
	var labels map[string]string
	if optedIn {
		labels = mesh.OptedIn
	}
	ns := mesh.Namespace(t, tg.Cluster, "", true, labels)
	noteNamespace(t, ns)
	return ns
}

// job is the demo's Job of n workers (the Job controller's default
// backoffLimit, 6: a real node retries an app that started before its
// proxy).
func job(name string, n int32, policy corev1.RestartPolicy, app mesh.App) *batchv1.Job {
	return mesh.TrainingJob(name, n, policy, app, nil)
}

// stuck: the app's last attempt exited 0 (on a real node after a failed
// first one, without the hold) and the proxy runs on.
func stuck(p *corev1.Pod) bool { return mesh.StuckDone(p, App) }

// waitStuck waits until all n pods of the Job are stuck: apps done,
// proxies running.
func (tg Target) waitStuck(t testing.TB, ns, name string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	if err := poll.Until(context.Background(), tg.Timeout, func(context.Context) (bool, error) {
		pods = mesh.Pods(t, tg.Cluster, ns, name)
		return len(pods) == n && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return !stuck(&p) }), nil
	}); err != nil {
		t.Fatalf("%d pods of %s with the app done and istio-proxy running: %v; pods: %s", n, name, err, mesh.PodStates(pods))
	}
	return pods
}

// WithoutIstioAux is the problem: outside the opt-in, Istio injects the
// proxy last with no hold; once the apps have run, the proxies keep
// running, both pods stay Running at 1/2 and the Job never completes. On a
// real node the app also starts before its proxy, so its first download
// fails and the kubelet runs it again.
func WithoutIstioAux(t testing.TB, tg Target) {
	ns := tg.namespace(t, false)
	mesh.CreateJob(t, tg.Cluster, ns, job("mnist", 2, corev1.RestartPolicyOnFailure, mesh.App{RunFor: "1s"}))
	pods := tg.waitStuck(t, ns, "mnist", 2)
	for _, p := range pods {
		if v, ok := p.Annotations[keys.AnnotationProxyConfig]; ok {
			t.Errorf("%s: mutated outside the opt-in: %s", p.Name, v)
		}
		if last := p.Spec.Containers[len(p.Spec.Containers)-1].Name; last != keys.ProxyContainer || mesh.ProxyFirstWithHold(&p) {
			t.Errorf("%s: Istio injected istio-proxy as %v; want it last, with no hold", p.Name, mesh.ContainerNames(&p))
		}
		if !tg.Real {
			continue
		}
		// The app started before its proxy was ready: its first attempt
		// exited 1 (the download is the app's only way to fail here), and
		// the kubelet ran it again.
		s := cluster.ContainerStatus(&p, App)
		if last := s.LastTerminationState.Terminated; s.RestartCount < 1 || last == nil || last.ExitCode != 1 || s.State.Terminated.ExitCode != 0 {
			t.Errorf("%s: app %+v; want a first attempt that failed its download, a last that exited 0", p.Name, s)
		}
		if out := tg.logs(t, ns, p.Name); !strings.Contains(out, fmt.Sprintf("app: attempt %d", s.RestartCount+1)) {
			t.Errorf("%s: the last attempt's log:\n%s", p.Name, out)
		}
	}
	poll.Consistently(t, 3*time.Second, "Job incomplete, its pods Running at 1/2", func(ctx context.Context) (bool, error) {
		j, err := tg.Cluster.Client().BatchV1().Jobs(ns).Get(ctx, "mnist", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pods := mesh.Pods(t, tg.Cluster, ns, "mnist")
		return j.Status.Succeeded == 0 && !mesh.JobHas(j, batchv1.JobComplete) && len(pods) == 2 && tg.halfReady(&pods[0]) && tg.halfReady(&pods[1]), nil
	})
	for _, p := range pods {
		if n := mesh.CountEvents(mesh.Events(t, tg.Cluster, ns, p.Name), "ProxyQuit"); n != 0 {
			t.Errorf("%s: quit outside the opt-in", p.Name)
		}
	}
}

// WithIstioAux is the fix: Istio injects the proxy first with its
// postStart wait (the hold istio-aux asked for), so the app's download
// works at its first attempt; once it exits, istio-aux quits the proxy,
// both pods Succeed, the Job completes and each pod has its ProxyQuit
// Event. It logs the timeline the README shows.
func WithIstioAux(t testing.TB, tg Target) {
	ns := tg.namespace(t, true)
	start := time.Now()
	mesh.CreateJob(t, tg.Cluster, ns, job("mnist", 2, corev1.RestartPolicyOnFailure, mesh.App{RunFor: "3s"}))
	tl := tg.watchTimeline(t, ns, "mnist")
	if j := mesh.WaitJob(t, tg.Cluster, ns, "mnist", batchv1.JobComplete, tg.Timeout); j.Status.Succeeded != 2 {
		t.Errorf("succeeded %d, want 2", j.Status.Succeeded)
	}
	pods := mesh.Pods(t, tg.Cluster, ns, "mnist")
	if len(pods) != 2 {
		t.Fatalf("%d pods, want 2", len(pods))
	}
	for _, p := range pods {
		if !strings.Contains(p.Annotations[keys.AnnotationProxyConfig], "holdApplicationUntilProxyStarts: true") {
			t.Errorf("%s: %s = %q, want the hold", p.Name, keys.AnnotationProxyConfig, p.Annotations[keys.AnnotationProxyConfig])
		}
		if !mesh.ProxyFirstWithHold(&p) {
			t.Errorf("%s: containers %v: Istio did not put istio-proxy first with its postStart wait", p.Name, mesh.ContainerNames(&p))
		}
		if app := cluster.ContainerStatus(&p, App); app.RestartCount != 0 || app.State.Terminated == nil || app.State.Terminated.ExitCode != 0 {
			t.Errorf("%s: app %+v; want its first attempt to succeed", p.Name, app.State)
		}
		checkQuit(t, &p)
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("%s: phase %s", p.Name, p.Status.Phase)
		}
		mesh.WaitEvent(t, tg.Cluster, ns, p.Name, "ProxyQuit")
		if tg.Real {
			out := tg.logs(t, ns, p.Name)
			for _, line := range []string{"app: attempt 1", "app: dataset downloaded", "app: epoch 3/3 done", "app: exiting with 0"} {
				if !strings.Contains(out, line) {
					t.Errorf("%s: the app's log lacks %q:\n%s", p.Name, line, out)
				}
			}
		}
	}
	tl.log(t, start)
}

// NeverFailingApp: restartPolicy Never and an app exiting 1: the kubelet
// will not run it again, so the proxy is quit, the pod fails and the Job
// counts the failure.
func NeverFailingApp(t testing.TB, tg Target) {
	ns := tg.namespace(t, true)
	j := job("failing", 1, corev1.RestartPolicyNever, mesh.App{RunFor: "1s", ExitCodes: []int{1}})
	j.Spec.BackoffLimit = ptr.To(int32(0))
	mesh.CreateJob(t, tg.Cluster, ns, j)
	if j := mesh.WaitJob(t, tg.Cluster, ns, "failing", batchv1.JobFailed, tg.Timeout); j.Status.Failed != 1 {
		t.Errorf("job failed = %d, want 1", j.Status.Failed)
	}
	p := mesh.OnlyPod(t, tg.Cluster, ns, "failing")
	if p.Status.Phase != corev1.PodFailed {
		t.Errorf("phase %s, want Failed", p.Status.Phase)
	}
	checkQuit(t, &p)
	mesh.WaitEvent(t, tg.Cluster, ns, p.Name, "ProxyQuit")
}

// OnFailureRetry: restartPolicy OnFailure, the app's first attempt exits
// 1: the kubelet runs it again, the retry still has its proxy, the proxy
// is quit after the retry succeeded, and the Job completes. (On kwok a
// premature quit shows too: its Stages make an app restarted without its
// proxy fail for ever.)
func OnFailureRetry(t testing.TB, tg Target) {
	ns := tg.namespace(t, true)
	j := job("retry", 1, corev1.RestartPolicyOnFailure, mesh.App{RunFor: "1s", ExitCodes: []int{1, 0}})
	j.Spec.BackoffLimit = ptr.To(int32(3))
	mesh.CreateJob(t, tg.Cluster, ns, j)
	mesh.WaitJob(t, tg.Cluster, ns, "retry", batchv1.JobComplete, tg.Timeout)
	CheckRetried(t, tg, ns, "retry")
}

// CheckRetried: the Job's one pod ran its app twice, the second attempt
// with a working network, and its proxy was quit once, after that attempt
// started.
func CheckRetried(t testing.TB, tg Target, ns, job string) {
	t.Helper()
	p := mesh.OnlyPod(t, tg.Cluster, ns, job)
	app := cluster.ContainerStatus(&p, App)
	if app.RestartCount != 1 || app.State.Terminated == nil || app.State.Terminated.ExitCode != 0 {
		t.Fatalf("app: restarts %d, state %+v; want one retry that exited 0", app.RestartCount, app.State)
	}
	if s := cluster.ContainerStatus(&p, keys.ProxyContainer); s.RestartCount != 0 {
		t.Errorf("istio-proxy: %+v; want it started once", s)
	}
	checkQuit(t, &p)
	mesh.WaitEvent(t, tg.Cluster, ns, p.Name, "ProxyQuit")
	// Event and pod times have whole seconds: a quit between the failure
	// and the retry within one second is caught by the Job not completing.
	evs := mesh.Events(t, tg.Cluster, ns, p.Name)
	if n := mesh.CountEvents(evs, "ProxyQuit"); n != 1 {
		t.Errorf("%d ProxyQuit Events, want 1", n)
	}
	for _, e := range evs {
		if started := app.State.Terminated.StartedAt.Time; e.Reason == "ProxyQuit" && e.FirstTimestamp.Time.Before(started) {
			t.Errorf("quit at %s, before the successful attempt started at %s", e.FirstTimestamp.Time, started)
		}
	}
	if out := tg.logs(t, ns, p.Name); tg.Real && (!strings.Contains(out, "app: attempt 2") || !strings.Contains(out, "app: dataset downloaded")) {
		t.Errorf("the retry did not download through its proxy:\n%s", out)
	}
}

// MissedWhileDown: pods that finished while the bridge was down are quit
// once it is back (its initial list, not a watch update).
func MissedWhileDown(t testing.TB, tg Target) {
	start := tg.StopBridge(t)
	started := false
	t.Cleanup(func() {
		if !started {
			_ = start()
		}
	})
	ns := tg.namespace(t, true)
	mesh.CreateJob(t, tg.Cluster, ns, job("offline", 2, corev1.RestartPolicyOnFailure, mesh.App{RunFor: "1s"}))
	pods := tg.waitStuck(t, ns, "offline", 2)
	started = true
	if err := start(); err != nil {
		t.Fatal(err)
	}
	mesh.WaitJob(t, tg.Cluster, ns, "offline", batchv1.JobComplete, tg.Timeout)
	for _, p := range pods {
		mesh.WaitEvent(t, tg.Cluster, ns, p.Name, "ProxyQuit")
	}
}

// NotOptedIn: outside the opt-in nothing is mutated and nothing is quit,
// whatever the pod does (WithoutIstioAux has the long form; this is a
// Never pod that finished).
func NotOptedIn(t testing.TB, tg Target) {
	ns := tg.namespace(t, false)
	mesh.CreateJob(t, tg.Cluster, ns, job("untouched", 1, corev1.RestartPolicyNever, mesh.App{RunFor: "1s", NoNetwork: true}))
	p := tg.waitStuck(t, ns, "untouched", 1)[0]
	mesh.PodStays(t, tg.Cluster, ns, p.Name, 3*time.Second, "the proxy still running", stuck)
	if _, ok := p.Annotations[keys.AnnotationProxyConfig]; ok || mesh.CountEvents(mesh.Events(t, tg.Cluster, ns, p.Name), "ProxyQuit") > 0 {
		t.Errorf("a pod outside the opt-in was mutated or quit: %v", p.Annotations)
	}
}

// halfReady is a stuck pod as kubectl shows it, 1/2: on a real node the
// proxy ready, the app not (kwok's Stages do not play readiness).
func (tg Target) halfReady(p *corev1.Pod) bool {
	return stuck(p) && (!tg.Real || cluster.ContainerStatus(p, keys.ProxyContainer).Ready && !cluster.ContainerStatus(p, App).Ready)
}

// checkQuit: istio-proxy was stopped by a quit (exit 0), not killed.
func checkQuit(t testing.TB, p *corev1.Pod) {
	t.Helper()
	if s := cluster.ContainerStatus(p, keys.ProxyContainer); s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
		t.Errorf("%s: istio-proxy %+v, want it quit (exit 0)", p.Name, s.State)
	}
}

// logs is the app container's log (empty on kwok, which runs nothing).
func (tg Target) logs(t testing.TB, ns, pod string) string {
	t.Helper()
	if !tg.Real {
		return ""
	}
	out, err := tg.Cluster.Client().CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: App}).DoRaw(context.Background())
	if err != nil {
		t.Errorf("logs of %s/%s: %v", ns, pod, err)
	}
	return string(out)
}

// timeline is when the test first saw each step of the story, per pod.
type timeline struct{ steps []step }

type step struct {
	at   time.Time
	what string
}

// watchTimeline polls the Job's pods, their Events and the Job until the
// Job completes or the target's timeout passes, noting when each step was
// first seen. The app's exit is the kubelet's own finishedAt (whole
// seconds); the rest are when the API showed them.
func (tg Target) watchTimeline(t testing.TB, ns, job string) *timeline {
	t.Helper()
	tl := &timeline{}
	seen := map[string]bool{}
	note := func(key string, at time.Time, what string) {
		if !seen[key] {
			seen[key] = true
			tl.steps = append(tl.steps, step{at, what})
		}
	}
	_ = poll.Until(context.Background(), tg.Timeout, func(ctx context.Context) (bool, error) {
		for _, p := range mesh.Pods(t, tg.Cluster, ns, job) {
			if s := cluster.ContainerStatus(&p, App).State.Terminated; s != nil && s.ExitCode == 0 {
				note(p.Name+"/app", s.FinishedAt.Time, fmt.Sprintf("pod %s: app exited 0 (kubelet's finishedAt)", p.Name))
			}
			if mesh.CountEvents(mesh.Events(t, tg.Cluster, ns, p.Name), "ProxyQuit") > 0 {
				note(p.Name+"/quit", time.Now(), fmt.Sprintf("pod %s: ProxyQuit Event", p.Name))
			}
			if p.Status.Phase == corev1.PodSucceeded {
				note(p.Name+"/done", time.Now(), fmt.Sprintf("pod %s: Succeeded", p.Name))
			}
		}
		j, err := tg.Cluster.Client().BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil || !mesh.JobHas(j, batchv1.JobComplete) {
			return false, err
		}
		note("job", time.Now(), fmt.Sprintf("job %s: Complete", job))
		return true, nil
	})
	return tl
}

func (tl *timeline) log(t testing.TB, start time.Time) {
	t.Helper()
	var b strings.Builder
	steps := slices.Clone(tl.steps)
	slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	for _, s := range steps {
		fmt.Fprintf(&b, "\n  %s  +%6.2fs  %s", s.at.Format("15:04:05.000"), s.at.Sub(start).Seconds(), s.what)
	}
	t.Logf("timeline (job created at %s):%s", start.Format("15:04:05.000"), b.String())
}
