//go:build e2e

package node

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/openshift"
	"github.com/istio-aux/istio-aux/test/poll"
)

// TestOpenShift: OpenShift Service Mesh's shape (mesh.OpenShift: Istio
// installed by revision with its OpenShift profile, Istio CNI, namespaces
// with UID ranges, restricted-v2 admission and Pod Security restricted
// enforced): the core scenarios, with istio-aux installed from the
// release's OpenShift variant, and what the shape changes checked.
func TestOpenShift(t *testing.T) {
	runCore(t, mesh.OpenShift)
	t.Run("RangesAndSCC", openshiftRanges)
}

// openshiftRanges: an opted-in Job's pod is admitted under restricted-v2
// with its app at the first UID of its namespace's range and its proxy at
// the last (istiod's OpenShift profile), the injector's multus annotation
// kept, held, and quit by an exec SCC admission lets through; istio-aux's
// own pods run with their namespace's IDs; a Job pinning a UID outside the
// range gets no pod.
func openshiftRanges(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	ctx := context.Background()
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	r := rangesOf(t, c, ns)
	mesh.CreateJob(t, c, ns, meshJob("scc", 1, corev1.RestartPolicyNever, worker(nil)))
	mesh.WaitJob(t, c, ns, "scc", batchv1.JobComplete, 3*time.Minute)
	p := mesh.OnlyPod(t, c, ns, "scc")
	if got := p.Annotations[openshift.AnnotationSCC]; got != openshift.RestrictedV2 {
		t.Errorf("admitted under SCC %q, want %s", got, openshift.RestrictedV2)
	}
	uid := func(name string) int64 {
		sc := cluster.Container(&p, name).SecurityContext
		if sc == nil || sc.RunAsUser == nil {
			t.Errorf("container %s has no runAsUser", name)
			return -1
		}
		return *sc.RunAsUser
	}
	if got := uid("tensorflow"); got != r.UID.Start {
		t.Errorf("the app runs as %d, want the range's first UID %d", got, r.UID.Start)
	}
	for _, name := range []string{keys.ProxyContainer, "istio-validation"} {
		if got := uid(name); got != r.UID.End {
			t.Errorf("%s runs as %d, want the range's last UID %d (istiod's OpenShift profile)", name, got, r.UID.End)
		}
	}
	if got := p.Annotations["k8s.v1.cni.cncf.io/networks"]; got != "default/istio-cni" {
		t.Errorf("multus annotation %q, want default/istio-cni (the injector's, kept)", got)
	}
	if !mesh.ProxyFirstWithHold(&p) {
		t.Errorf("containers %v: no hold", mesh.ContainerNames(&p))
	}
	mesh.OneEvent(t, c, ns, p.Name, "ProxyQuit")

	// istio-aux's own pods: IDs from their namespace's range, none pinned.
	sys := rangesOf(t, c, istioaux.SystemNamespace)
	pods, err := c.Client().CoreV1().Pods(istioaux.SystemNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if errs := openshift.Validate(&pod, sys); len(errs) > 0 {
			t.Errorf("istio-aux's pod %s does not fit restricted-v2: %q", pod.Name, errs)
		}
	}

	// The stand-in refuses what restricted-v2 refuses.
	pinned := meshJob("pinned", 1, corev1.RestartPolicyNever, worker(nil))
	pinned.Spec.Template.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(65532))}
	mesh.CreateJob(t, c, ns, pinned)
	poll.Eventually(t, time.Minute, "the Job's pod refused by SCC admission", func(ctx context.Context) (bool, error) {
		evs, err := c.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=pinned"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedCreate" && strings.Contains(e.Message, openshift.RestrictedV2) {
				return true, nil
			}
		}
		return false, nil
	})
	if n := len(mesh.Pods(t, c, ns, "pinned")); n != 0 {
		t.Errorf("%d pods of the pinned Job exist", n)
	}
}

// rangesOf is the namespace's ranges, as the stand-in allocated them.
func rangesOf(t *testing.T, c *cluster.Cluster, name string) openshift.Ranges {
	t.Helper()
	ns, err := c.Client().CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := openshift.RangesOf(ns)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
