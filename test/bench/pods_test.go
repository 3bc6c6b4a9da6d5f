//go:build e2e

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// parkedNode is a node that does not exist: pods bound to it are left
// alone by the harness's binder and by kwok, so memory and admission runs
// measure only what watches them.
const parkedNode = "bench-parked"

// app is the run-to-completion container of every bench pod.
const app = "app"

// benchPod is a Job worker as Istio's injector leaves it: the sidecar's
// status annotation, a proxy with its usual arguments and environment, and
// one app. Its size matters for the memory comparison.
func benchPod(name string) *corev1.Pod {
	env := make([]corev1.EnvVar, 0, 20)
	for i := range 20 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("ISTIO_META_%d", i), Value: strings.Repeat("v", 40)})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			"sidecar.istio.io/status": `{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["workload-socket","credential-socket","workload-certs","istio-envoy","istio-data","istio-podinfo","istio-token","istiod-ca-cert"],"imagePullSecrets":null,"revision":"default"}`,
			"prometheus.io/path":      "/stats/prometheus",
			"istio.io/rev":            "default",
		}, Labels: map[string]string{"app": "bench", "security.istio.io/tlsMode": "istio"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{
				{Name: keys.ProxyContainer, Image: "docker.io/istio/proxyv2:1.27.0",
					Args: []string{"proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local", "--proxyLogLevel=warning"},
					Env:  env, Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090}},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}},
				{Name: app, Image: "registry.example/mnist:1.0", Command: []string{"python", "-u", "mnist.py"}},
			},
		},
	}
}

// runningStatus is what a kubelet reports for a started bench pod.
func runningStatus(pod *corev1.Pod) corev1.PodStatus {
	now := metav1.Now()
	s := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.17", HostIP: "127.0.0.1", StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}}
	for _, c := range pod.Spec.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			ImageID:     c.Image + "@sha256:" + strings.Repeat("a", 64),
			ContainerID: "containerd://" + strings.Repeat("c", 64),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	return s
}

// createPods creates a benchPod for each of pods with 16 clients, changed
// by mutate (if not nil; i is its index in pods); parked pods are bound to
// parkedNode and reported Running.
func createPods(ctx context.Context, cs kubernetes.Interface, pods []podRef, parked bool, mutate func(i int, p *corev1.Pod)) error {
	return parallel(len(pods), 16, func(i int) error {
		ref := pods[i]
		pod := benchPod(ref.name)
		if mutate != nil {
			mutate(i, pod)
		}
		if parked {
			pod.Spec.NodeName = parkedNode
		}
		p, err := cs.CoreV1().Pods(ref.ns).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil && parked {
			p.Status = runningStatus(p)
			_, err = cs.CoreV1().Pods(ref.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("pod %s/%s: %w", ref.ns, ref.name, err)
		}
		return nil
	})
}

// waitRunning polls until every pod in ns runs its app. Each look lists up
// to every pod of a scale step, so it looks twice a second, not at
// poll.Interval: the API server's CPU is what the bench measures.
func waitRunning(ctx context.Context, cs kubernetes.Interface, ns string, n int, timeout time.Duration) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := poll.UntilEvery(ctx, 500*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running := 0
		for i := range l.Items {
			if cluster.ContainerStatus(&l.Items[i], app).State.Running != nil && cluster.ContainerStatus(&l.Items[i], keys.ProxyContainer).State.Running != nil {
				running++
			}
		}
		pods = l.Items
		return running == n, fmt.Errorf("%d of %d pods running", running, n)
	})
	return pods, err
}

// terminateApp plays the kubelet reporting that the app exited 0.
func terminateApp(ctx context.Context, cs kubernetes.Interface, ns, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		for i, s := range p.Status.ContainerStatuses {
			if s.Name == app && s.State.Running != nil {
				p.Status.ContainerStatuses[i].Ready = false
				p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 0, Reason: "Completed", StartedAt: s.State.Running.StartedAt, FinishedAt: now}}
			}
		}
		_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
}

// optedIn is mesh.OptedIn when on, else no label.
func optedIn(on bool) map[string]string {
	if on {
		return mesh.OptedIn
	}
	return nil
}

// parkedNamespace creates a namespace with Istio's injection on and the
// given labels, without waiting for a default ServiceAccount as
// mesh.CreateNamespace does: the admission, memory and watch-scope control
// planes run no controller manager, so none ever gets one, and their pods,
// parked on a node that does not exist, need none.
func parkedNamespace(ctx context.Context, cs kubernetes.Interface, name string, labels map[string]string) error {
	l := map[string]string{keys.LabelInjection: "enabled"}
	maps.Copy(l, labels)
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, metav1.CreateOptions{})
	return err
}

// podRef names one pod.
type podRef struct{ ns, name string }

// refs names pods prefix-00000 .. prefix-(n-1) in ns, as createPods names them.
func refs(ns, prefix string, n int) []podRef {
	out := make([]podRef, n)
	for i := range out {
		out[i] = podRef{ns, fmt.Sprintf("%s-%05d", prefix, i)}
	}
	return out
}

// churn changes the status of pods, one at a time in turn, perSecond times
// a second in total (its Ready condition flips, as a probe's would), until
// the returned stop is called; stop returns how many changes were written.
func churn(ctx context.Context, cs kubernetes.Interface, pods []podRef, perSecond int) (stop func() int64) {
	if len(pods) == 0 {
		return func() int64 { return 0 }
	}
	ctx, cancel := context.WithCancel(ctx)
	var done atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p := pods[i%len(pods)]
			ready := "False"
			if (i/len(pods))%2 == 1 {
				ready = "True"
			}
			patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
				"type": "Ready", "status": ready, "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}}}})
			// Not ctx: a change sent when stop is called is finished, so
			// that the count says exactly what was written.
			pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := cs.CoreV1().Pods(p.ns).Patch(pctx, p.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
			pcancel()
			if err == nil {
				done.Add(1)
			}
		}
	})
	return func() int64 { cancel(); wg.Wait(); return done.Load() }
}

// optIn sets (on) or removes istio-aux's opt-in label on every namespace
// in names, with 16 clients.
func optIn(t *testing.T, cs kubernetes.Interface, names []string, on bool) {
	ctx := context.Background()
	var v any
	if on {
		v = "true"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{keys.LabelEnabled: v}}})
	if err := parallel(len(names), 16, func(i int) error {
		return retry.OnError(retry.DefaultBackoff, func(error) bool { return ctx.Err() == nil }, func() error {
			_, err := cs.CoreV1().Namespaces().Patch(ctx, names[i], types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		})
	}); err != nil {
		t.Fatal(err)
	}
}

// parallel runs f(0..n-1), at most workers at a time, and returns the
// first error.
func parallel(n, workers int, f func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(workers)
	for i := range n {
		g.Go(func() error { return f(i) })
	}
	return g.Wait()
}
