//go:build e2e

package node

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// The whole cluster the real node makes (issue 21): a Service resolved by
// cluster DNS and reached through kube-proxy, and the workloads users
// write, as they write them, with istio-aux installed as users install it.

// TestNodeClusterDNS: a pod resolves a Service of its namespace by its
// short and full names through CoreDNS, and reaches it and the kubernetes
// Service through kube-proxy's rules; the images come from the node's
// registry as pods name them.
func TestNodeClusterDNS(t *testing.T) {
	c := nodeCluster(t)
	t.Parallel()
	ns := mesh.Namespace(t, c, "", false, nil)
	mesh.Web(t, c, ns)
	mesh.Probe(t, c, ns, "",
		"http://web/",
		"http://web."+ns+".svc."+cluster.ClusterDomain+"/",
		"kubernetes.default.svc:443",
		"kubernetes.default.svc."+cluster.ClusterDomain+":443")
}

// TestNodeJobWithoutServiceAccount: a user's Job with no serviceAccountName
// gets its pod (ServiceAccount admission fills it in, Istio's token volume
// validates) and completes with its proxy quit.
func TestNodeJobWithoutServiceAccount(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	j := meshJob("no-sa", 1, corev1.RestartPolicyNever, worker(nil))
	j.Spec.Template.Spec.ServiceAccountName = ""
	mesh.CreateJob(t, c, ns, j)
	mesh.WaitJob(t, c, ns, "no-sa", batchv1.JobComplete, 3*time.Minute)
	p := mesh.OnlyPod(t, c, ns, "no-sa")
	if p.Spec.ServiceAccountName != "default" {
		t.Errorf("serviceAccountName %q: ServiceAccount admission did not fill it in", p.Spec.ServiceAccountName)
	}
	mesh.WaitEvent(t, c, ns, p.Name, "ProxyQuit")
}

// TestNodeDeploymentLeftRunning: a Deployment in an opted-in namespace (a
// long-running workload: restartPolicy Always) keeps its proxy: istio-aux
// never quits it.
func TestNodeDeploymentLeftRunning(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	ctx := context.Background()
	labels := map[string]string{"app": "api"}
	d := deployment(ns, "api", labels, corev1.Container{Name: "api", Image: images.AppRef, Args: []string{"serve", ":8080"}})
	if _, err := c.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := poll.Until(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=api"})
		if err != nil || len(l.Items) != 1 {
			return false, err
		}
		pod = l.Items[0]
		return cluster.PodReady(&pod), nil
	}); err != nil {
		t.Fatalf("the Deployment's pod is not Ready: %v", err)
	}
	mesh.PodStays(t, c, ns, pod.Name, 3*time.Second, "the app and its proxy running", func(p *corev1.Pod) bool {
		return running(p, "api") && running(p, keys.ProxyContainer)
	})
	if mesh.CountEvents(mesh.Events(t, c, ns, pod.Name), "ProxyQuit") > 0 {
		t.Error("istio-aux quit a Deployment's proxy")
	}
}

func deployment(ns, name string, labels map[string]string, ctr corev1.Container) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(5)), Containers: []corev1.Container{ctr}},
			},
		},
	}
}
