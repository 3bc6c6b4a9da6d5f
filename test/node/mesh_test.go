//go:build e2e

package node

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/istioaux"
)

// The mesh on the real node, shared by the scenario tests: the real istiod
// as the sidecar injector (classic sidecars, as Istio decides with
// ENABLE_NATIVE_SIDECARS=false), the proxy image with the real pilot-agent
// and the Envoy stand-in (test/istio), and istio-aux's own webhook and
// all-in-one bridge (embedded NATS, the function in-process), all inside
// the node's network namespace.
var mesh struct {
	once   sync.Once
	istiod *istio.Istiod
	aux    *istioaux.IstioAux
	err    error
}

// meshCluster returns the shared cluster with the mesh started on it.
func meshCluster(t *testing.T) (*cluster.Cluster, *istioaux.IstioAux) {
	t.Helper()
	c := nodeCluster(t)
	mesh.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		start := time.Now()
		if mesh.err = istio.Built(); mesh.err != nil {
			return
		}
		if mesh.err = istio.EnsureEnvoy(ctx); mesh.err != nil {
			return
		}
		img, err := istio.ProxyImageContents(istio.BinDir(), istio.EnvoyBin())
		if err == nil {
			err = c.ImportImage(ctx, img)
		}
		if mesh.err = err; err != nil {
			return
		}
		if mesh.istiod, mesh.err = istio.Start(ctx, c, istio.Options{NativeSidecars: "false", Log: shared.log}); mesh.err != nil {
			return
		}
		mesh.aux, mesh.err = istioaux.Start(ctx, c, shared.log)
		fmt.Fprintf(os.Stderr, "istiod and istio-aux up on the real node in %s\n", time.Since(start).Round(time.Millisecond))
	})
	if mesh.err != nil {
		t.Fatal(mesh.err)
	}
	return c, mesh.aux
}

func stopMesh() {
	if mesh.aux != nil {
		_ = mesh.aux.Stop()
	}
	if mesh.istiod != nil {
		_ = mesh.istiod.Stop()
	}
}

// meshNamespace creates the test's namespace with Istio's injection on
// and, if optedIn, istio-aux's label.
func meshNamespace(t *testing.T, c *cluster.Cluster, optedIn bool) string {
	t.Helper()
	ns := namespace(t, c)
	labels := map[string]string{keys.LabelInjection: "enabled"}
	if optedIn {
		labels[keys.LabelEnabled] = "true"
	}
	n, err := c.Client().CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = labels
	if _, err := c.Client().CoreV1().Namespaces().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// worker is the training app (test/cmd/app) as a Job's container, named
// like the reference demo's, with its attempts counted on an emptyDir.
func worker(env map[string]string) corev1.Container {
	c := corev1.Container{Name: "tensorflow", Image: images.AppRef, ImagePullPolicy: corev1.PullIfNotPresent,
		Env:          []corev1.EnvVar{{Name: "APP_ATTEMPT_FILE", Value: "/attempts/count"}},
		VolumeMounts: []corev1.VolumeMount{{Name: "attempts", MountPath: "/attempts"}}}
	for k, v := range env {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
	}
	return c
}

// meshJob is a Job of n pods of one app container, as a training operator
// or a user writes it: nothing about Istio or istio-aux in it but the
// service account Istio's injected token needs (a real cluster's
// ServiceAccount admission would fill it in).
func meshJob(name string, n int32, policy corev1.RestartPolicy, app corev1.Container) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			Completions: ptr.To(n), Parallelism: ptr.To(n), BackoffLimit: ptr.To(int32(6)),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy:                 policy,
				ServiceAccountName:            istio.ServiceAccount,
				DNSPolicy:                     corev1.DNSDefault,
				TerminationGracePeriodSeconds: ptr.To(int64(5)),
				Containers:                    []corev1.Container{app},
				Volumes: []corev1.Volume{{Name: "attempts",
					VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			}},
		},
	}
}

func createJob(t *testing.T, c *cluster.Cluster, ns string, j *batchv1.Job) {
	t.Helper()
	if _, err := c.Client().BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func jobPods(t *testing.T, c *cluster.Cluster, ns, job string) []corev1.Pod {
	t.Helper()
	l, err := c.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
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
		return jobCondition(j, cond), nil
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

func jobCondition(j *batchv1.Job, cond batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == cond && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
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

// proxyFirstWithHold reports whether Istio injected istio-proxy as the first
// container with the postStart `pilot-agent wait`: what the hold asks for.
func proxyFirstWithHold(p *corev1.Pod) bool {
	if len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Name != keys.ProxyContainer {
		return false
	}
	h := p.Spec.Containers[0].Lifecycle
	return h != nil && h.PostStart != nil && h.PostStart.Exec != nil &&
		strings.Join(h.PostStart.Exec.Command, " ") == "pilot-agent wait"
}
