//go:build e2e

package node

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// holdHook is what Istio's injector adds to istio-proxy with
// holdApplicationUntilProxyStarts: the next container starts only once the
// hook has returned, that is once the proxy is ready.
var holdHook = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
	Exec: &corev1.ExecAction{Command: []string{"pilot-agent", "wait"}},
}}

// quit is istio-aux's quit command, run in istio-proxy through the API
// server; it returns kubectl's exit code.
func quit(t *testing.T, ns, pod string) int {
	t.Helper()
	out, code := kubectl(t, nodeCluster(t), "exec", "-n", ns, pod, "-c", "istio-proxy", "--", "pilot-agent", "request", "POST", "quitquitquit")
	if code != 0 {
		t.Logf("quit %s/%s: exit %d: %s", ns, pod, code, out)
	}
	return code
}

// TestNodePostStartHold: a postStart exec hook on the first container
// (istio-proxy, ready only after 3 s) holds the app's start until the proxy
// is ready: the app's first line comes after the proxy's "ready" and its
// download works at the first attempt. The control pod, whose proxy never
// gets ready and has no hook, shows what the hold prevents: the app starts
// at once and its download is refused.
func TestNodePostStartHold(t *testing.T) {
	c := nodeCluster(t)
	t.Parallel()
	ns := namespace(t, c)
	app := appContainer(map[string]string{"APP_RUN_FOR": "1s"})
	held := proxyContainer("3s")
	held.Lifecycle = holdHook
	create(t, c, newPod(ns, "held", corev1.RestartPolicyNever, held, app))
	create(t, c, newPod(ns, "unheld", corev1.RestartPolicyNever, proxyContainer("1h"), app))

	p := waitPod(t, c, ns, "held", time.Minute, func(p *corev1.Pod) bool { return terminated(p, "app") != nil })
	if s := terminated(p, "app"); s.ExitCode != 0 || status(p, "app").RestartCount != 0 || !running(p, "istio-proxy") {
		t.Errorf("held: %s; want the app's first attempt to exit 0 while the proxy runs", describe(p.Status.ContainerStatuses))
	}
	ready := logTime(t, c, ns, "held", "istio-proxy", "proxy: ready")
	started := logTime(t, c, ns, "held", "app", "app: attempt 1")
	if started.Before(ready) {
		t.Errorf("held: the app started at %s, before the proxy was ready at %s", started, ready)
	}
	t.Logf("held: proxy ready -> app's first line: %s", started.Sub(ready).Round(time.Millisecond))
	logTime(t, c, ns, "held", "app", "app: dataset downloaded")

	u := waitPod(t, c, ns, "unheld", time.Minute, func(p *corev1.Pod) bool { return terminated(p, "app") != nil })
	if s := terminated(u, "app"); s.ExitCode != 1 {
		t.Errorf("unheld: %s; want the app to exit 1, its download refused", describe(u.Status.ContainerStatuses))
	}
	logTime(t, c, ns, "unheld", "app", "connection refused")
	// Both pods end once their proxy is quit, with the apps' real outcome.
	for name, phase := range map[string]corev1.PodPhase{"held": corev1.PodSucceeded, "unheld": corev1.PodFailed} {
		if code := quit(t, ns, name); code != 0 {
			t.Fatalf("quitting %s's proxy exited %d", name, code)
		}
		waitPod(t, c, ns, name, 30*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == phase })
	}
}

// logTime is when the container logged its first line containing text,
// by the runtime's timestamp; the test fails if there is no such line.
func logTime(t *testing.T, c *cluster.Cluster, ns, pod, container, text string) time.Time {
	t.Helper()
	out, code := kubectl(t, c, "logs", "--timestamps", "-n", ns, pod, "-c", container)
	for line := range strings.Lines(out) {
		if ts, rest, ok := strings.Cut(line, " "); ok && code == 0 && strings.Contains(rest, text) {
			if at, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				return at
			}
		}
	}
	t.Fatalf("%s/%s %s logged no line with %q (kubectl exit %d): %s", ns, pod, container, text, code, out)
	return time.Time{}
}

// TestNodeNativeSidecar: a native sidecar (an init container with
// restartPolicy Always and a startup probe, as Istio injects it) starts
// before the app, and the kubelet stops it after the app exits; the pod
// Succeeds with no quit at all.
func TestNodeNativeSidecar(t *testing.T) {
	c := nodeCluster(t)
	t.Parallel()
	ns := namespace(t, c)
	always := corev1.ContainerRestartPolicyAlways
	proxy := proxyContainer("1s")
	proxy.RestartPolicy = &always
	// The kubelet probes the pod's address across the node's bridge.
	proxy.StartupProbe = &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz/ready", Port: intstr.FromInt32(15021)}},
		PeriodSeconds:    1,
		FailureThreshold: 30,
	}
	pod := newPod(ns, "native", corev1.RestartPolicyNever, appContainer(map[string]string{"APP_RUN_FOR": "1s"}))
	pod.Spec.InitContainers = []corev1.Container{proxy}
	created := time.Now()
	create(t, c, pod)
	p := waitPod(t, c, ns, "native", time.Minute, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	t.Logf("native sidecar pod create -> %s: %s", p.Status.Phase, time.Since(created).Round(time.Millisecond))
	app, proxyEnd := terminated(p, "app"), terminated(p, "istio-proxy")
	if p.Status.Phase != corev1.PodSucceeded || app == nil || app.ExitCode != 0 || status(p, "app").RestartCount != 0 || proxyEnd == nil {
		t.Fatalf("phase %s, init %s, containers %s; want Succeeded, the app's first attempt exiting 0, the sidecar stopped",
			p.Status.Phase, describe(p.Status.InitContainerStatuses), describe(p.Status.ContainerStatuses))
	}
	if proxyEnd.StartedAt.Before(&app.FinishedAt) && proxyEnd.FinishedAt.Before(&app.FinishedAt) {
		t.Errorf("the sidecar ended (%s) before the app (%s)", proxyEnd.FinishedAt, app.FinishedAt)
	}
}

// TestNodeOnFailureRestart: with restartPolicy OnFailure the kubelet
// restarts a failing app in the same pod (the attempt count survives on an
// emptyDir) while the proxy keeps running; the second attempt exits 0 and
// the pod stays Running (1/2) until its proxy is quit.
func TestNodeOnFailureRestart(t *testing.T) {
	c := nodeCluster(t)
	t.Parallel()
	ns := namespace(t, c)
	proxy := proxyContainer("0s")
	proxy.Lifecycle = holdHook
	app := appContainer(map[string]string{"APP_RUN_FOR": "1s", "APP_EXIT_CODES": "1,0", "APP_ATTEMPT_FILE": "/attempts/count"})
	app.VolumeMounts = []corev1.VolumeMount{{Name: "attempts", MountPath: "/attempts"}}
	pod := newPod(ns, "onfailure", corev1.RestartPolicyOnFailure, proxy, app)
	pod.Spec.Volumes = []corev1.Volume{{Name: "attempts", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	create(t, c, pod)
	p := waitPod(t, c, ns, "onfailure", time.Minute, func(p *corev1.Pod) bool {
		s := status(p, "app")
		return s.RestartCount >= 1 && s.State.Terminated != nil
	})
	s := status(p, "app")
	if s.RestartCount != 1 || s.State.Terminated.ExitCode != 0 || s.LastTerminationState.Terminated == nil || s.LastTerminationState.Terminated.ExitCode != 1 {
		t.Errorf("app = %s, last %+v; want exit 0 after one restart from exit 1", describe(p.Status.ContainerStatuses), s.LastTerminationState.Terminated)
	}
	if p.Status.Phase != corev1.PodRunning || !running(p, "istio-proxy") {
		t.Errorf("phase %s, %s; want Running with the proxy up", p.Status.Phase, describe(p.Status.ContainerStatuses))
	}
	if out, _ := kubectl(t, c, "logs", "-n", ns, "onfailure", "-c", "app"); !strings.Contains(out, "app: attempt 2, will exit 0") {
		t.Errorf("app's log = %q, want attempt 2", out)
	}
	if code := quit(t, ns, "onfailure"); code != 0 {
		t.Fatalf("quit exited %d", code)
	}
	waitPod(t, c, ns, "onfailure", 30*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
}

// TestNodeClassicSidecar: a classic istio-proxy sidecar keeps the pod
// Running (1/2 ready) after the app exited 0, for as long as nobody quits
// it: this is the problem istio-aux solves. The quit through `kubectl exec`
// ends the proxy with 0 and the pod Succeeds.
func TestNodeClassicSidecar(t *testing.T) {
	c := nodeCluster(t)
	t.Parallel()
	ns := namespace(t, c)
	proxy := proxyContainer("0s")
	proxy.Lifecycle = holdHook
	create(t, c, newPod(ns, "classic", corev1.RestartPolicyNever, proxy, appContainer(map[string]string{"APP_RUN_FOR": "1s"})))
	waitPod(t, c, ns, "classic", time.Minute, func(p *corev1.Pod) bool {
		app := terminated(p, "app")
		return app != nil && app.ExitCode == 0
	})
	onlyProxyReady := func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && running(p, "istio-proxy") &&
			status(p, "istio-proxy").Ready && !status(p, "app").Ready
	}
	// Longer than a few PLEG relists and status syncs: nothing ends it.
	stays(t, c, ns, "classic", 3*time.Second, "Running with 1/2 ready", onlyProxyReady)
	quitAt := time.Now()
	if code := quit(t, ns, "classic"); code != 0 {
		t.Fatalf("quit exited %d", code)
	}
	p := waitPod(t, c, ns, "classic", 30*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	t.Logf("quit -> Succeeded: %s", time.Since(quitAt).Round(time.Millisecond))
	if s := terminated(p, "istio-proxy"); s == nil || s.ExitCode != 0 {
		t.Errorf("istio-proxy = %s, want terminated with 0", describe(p.Status.ContainerStatuses))
	}
}
