//go:build e2e

package bench

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
func benchPod(name string, annotations map[string]string) *corev1.Pod {
	env := make([]corev1.EnvVar, 0, 20)
	for i := range 20 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("ISTIO_META_%d", i), Value: strings.Repeat("v", 40)})
	}
	ann := map[string]string{
		"sidecar.istio.io/status": `{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["workload-socket","credential-socket","workload-certs","istio-envoy","istio-data","istio-podinfo","istio-token","istiod-ca-cert"],"imagePullSecrets":null,"revision":"default"}`,
		"prometheus.io/path":      "/stats/prometheus",
		"istio.io/rev":            "default",
	}
	for k, v := range annotations {
		ann[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann,
			Labels: map[string]string{"app": "bench", "security.istio.io/tlsMode": "istio"}},
		Spec: podSpec(env),
	}
}

func podSpec(env []corev1.EnvVar) corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{
			{Name: keys.ProxyContainer, Image: "docker.io/istio/proxyv2:1.27.0",
				Args: []string{"proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local", "--proxyLogLevel=warning"},
				Env:  env, Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}},
			{Name: app, Image: "registry.example/mnist:1.0", Command: []string{"python", "-u", "mnist.py"}},
		},
	}
}

// annotate adds annotations to every pod createPods creates.
func annotate(annotations map[string]string) func(int, *corev1.Pod) {
	return func(_ int, p *corev1.Pod) {
		for k, v := range annotations {
			p.Annotations[k] = v
		}
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

// createPods creates pods from..to-1 named prefix-<i> in ns with parallel
// clients, each changed by mutate (if not nil); parked pods are bound to
// parkedNode and reported Running.
func createPods(ctx context.Context, cs kubernetes.Interface, ns, prefix string, from, to int, parked bool, mutate func(i int, p *corev1.Pod)) error {
	return parallel(to-from, 16, func(i int) error {
		i += from
		pod := benchPod(fmt.Sprintf("%s-%05d", prefix, i), nil)
		if mutate != nil {
			mutate(i, pod)
		}
		return createPod(ctx, cs, ns, pod, parked)
	})
}

// createPod creates pod in ns; parked, it is bound to parkedNode and
// reported Running.
func createPod(ctx context.Context, cs kubernetes.Interface, ns string, pod *corev1.Pod, parked bool) error {
	if parked {
		pod.Spec.NodeName = parkedNode
	}
	p, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err == nil && parked {
		p.Status = runningStatus(p)
		_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", ns, pod.Name, err)
	}
	return nil
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

// createNamespace is mesh.CreateNamespace, opted in or not: it waits for
// the namespace's default ServiceAccount, which the controller manager makes
// (the reaction and scale control plane).
func createNamespace(ctx context.Context, cs kubernetes.Interface, name string, optedIn bool) error {
	var labels map[string]string
	if optedIn {
		labels = mesh.OptedIn
	}
	return mesh.CreateNamespace(ctx, cs, name, labels)
}

// createParkedNamespace is createNamespace for the admission and memory
// control plane, which runs no controller manager, so no namespace there
// ever gets a default ServiceAccount: its pods, parked on a node that does
// not exist, need none.
func createParkedNamespace(ctx context.Context, cs kubernetes.Interface, name string, optedIn bool) error {
	var labels map[string]string
	if optedIn {
		labels = mesh.OptedIn
	}
	return parkedNamespace(ctx, cs, name, labels)
}

// parkedNamespace creates a namespace with Istio's injection on and the
// given labels, without waiting for a default ServiceAccount (see
// createParkedNamespace): also for the watch-scope control plane, which
// runs no controller manager either.
func parkedNamespace(ctx context.Context, cs kubernetes.Interface, name string, labels map[string]string) error {
	l := map[string]string{keys.LabelInjection: "enabled"}
	maps.Copy(l, labels)
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, metav1.CreateOptions{})
	return err
}
