//go:build e2e

package node

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// cniTrafficCaptured (TestCNI's): with Istio CNI the pod's traffic goes
// through its proxy for real, so an app that starts before its proxy has
// its first connection refused (the start problem as users meet it: the
// plugin's rules redirect it to a proxy not yet listening), and with
// istio-aux the proxy comes first and the same app's first attempt
// reaches a Service (through the caller's proxy out and the backend's
// proxy in) and its Job completes once istio-aux quits the proxy. Both
// pods carry istio-validation, which passed, and no istio-init.
func cniTrafficCaptured(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	svc := mesh.Namespace(t, c, "-svc", true, nil)
	mesh.Web(t, c, svc) // its pod's inbound traffic is captured too
	url := fmt.Sprintf("http://web.%s.svc.cluster.local/", svc)
	// The app downloads from the Service; a proxy slow to get ready leaves
	// no doubt which comes first: 5 s where istio-aux holds the app, a
	// minute where nothing does, longer than any slow start of the app (a
	// cold node) could take to reach its download.
	app := func() corev1.Container {
		return worker(map[string]string{"APP_DATASET_URL": url})
	}
	slow := func(delay string) map[string]string {
		return map[string]string{keys.AnnotationProxyConfig: "proxyMetadata:\n  ISTIO_AUX_ENVOY_READY_DELAY: " + delay + "\n"}
	}

	plain := mesh.Namespace(t, c, "-plain", true, nil)
	j := meshJob("early", 1, corev1.RestartPolicyNever, app())
	j.Spec.BackoffLimit = ptr.To(int32(0))
	j.Spec.Template.Annotations = slow("1m")
	mesh.CreateJob(t, c, plain, j)

	opted := mesh.Namespace(t, c, "-opted", true, mesh.OptedIn)
	j = meshJob("held", 1, corev1.RestartPolicyNever, app())
	j.Spec.Template.Annotations = slow("5s")
	mesh.CreateJob(t, c, opted, j)

	// Without istio-aux: the app's download is refused and it exits 1;
	// the proxy then keeps the pod Running, so the Job never ends. (The Job
	// controller makes the pod after the Job: wait for it to exist too.)
	early := &mesh.WaitPods(t, c, plain, "early", 1, 2*time.Minute, func(p *corev1.Pod) bool {
		return terminated(p, "tensorflow") != nil
	})[0]
	if code := terminated(early, "tensorflow").ExitCode; code != 1 {
		t.Errorf("the app without istio-aux exited %d, want 1 (its download refused)", code)
	}
	if log, _ := kubectl(t, c, "logs", "-n", plain, early.Name, "-c", "tensorflow"); !strings.Contains(log, "connection refused") {
		t.Errorf("the app's log does not say its connection was refused:\n%s", log)
	}
	checkCNIPod(t, early)

	// With istio-aux: held, downloaded at the first attempt, quit.
	mesh.WaitJob(t, c, opted, "held", batchv1.JobComplete, 3*time.Minute)
	held := mesh.OnlyPod(t, c, opted, "held")
	if !mesh.ProxyFirstWithHold(&held) {
		t.Errorf("containers %v: no hold", mesh.ContainerNames(&held))
	}
	if s := cluster.ContainerStatus(&held, "tensorflow"); s.RestartCount != 0 || s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
		t.Errorf("the held app: %s", mesh.Describe(held.Status.ContainerStatuses))
	}
	mesh.OneEvent(t, c, opted, held.Name, "ProxyQuit")
	checkCNIPod(t, &held)
	if log, _ := kubectl(t, c, "logs", "-n", opted, held.Name, "-c", keys.ProxyContainer); !strings.Contains(log, "virtualOutbound listening") {
		t.Errorf("the proxy never captured outbound traffic:\n%s", log)
	}
	if p := mesh.OnlyPod(t, c, plain, "early"); !mesh.Stuck(&p, "tensorflow") {
		t.Errorf("the pod without istio-aux: %s (want Running, its proxy keeping it)", mesh.PodStates([]corev1.Pod{p}))
	}
}

// checkCNIPod: the pod was injected for Istio CNI (istio-validation, which
// passed, in place of istio-init) and its traffic is captured by REDIRECT.
func checkCNIPod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	names := mesh.ContainerNames(p)
	if !slices.Contains(names, "init:istio-validation") || slices.Contains(names, "init:istio-init") {
		t.Errorf("%s: containers %v, want istio-validation and no istio-init", p.Name, names)
	}
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == "istio-validation" && (s.State.Terminated == nil || s.State.Terminated.ExitCode != 0) {
			t.Errorf("%s: istio-validation %s", p.Name, mesh.Describe([]corev1.ContainerStatus{s}))
		}
	}
	if m := p.Annotations["sidecar.istio.io/interceptionMode"]; m != "REDIRECT" {
		t.Errorf("%s: interception mode %q, want REDIRECT", p.Name, m)
	}
}
