//go:build e2e

package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
	"github.com/istio-aux/istio-aux/test/realnode"
)

// istio-aux as users install it (issue 21): `ko apply -f config/` and `ko
// apply -f config/standalone/`, and each of its pods deleted while Jobs
// run. These tests switch the shared install or delete its pods, so they
// are not parallel: Go runs them before the parallel tests.

// TestNodeInstallStandalone: config/standalone/ (the webhook and the
// all-in-one) runs the seed's story, then survives its pods being deleted
// mid-run.
func TestNodeInstallStandalone(t *testing.T) {
	c, aux := installedAs(t, istioaux.Standalone)
	checkInstalled(t, c, aux)
	t.Run("seed", func(t *testing.T) { seedStory(t, c) })
	t.Run("pods-deleted", func(t *testing.T) { runWhileDeleting(t, c, aux, "istio-aux-webhook", aux.Watcher()) })
}

// TestNodeInstallConfig: config/ and config/nats/ (the webhook, the bridge,
// the function, NATS with its store on a volume) run the seed's story, then
// survive each of their pods being deleted mid-run.
func TestNodeInstallConfig(t *testing.T) {
	c, aux := installedAs(t, istioaux.Config)
	checkInstalled(t, c, aux)
	t.Run("seed", func(t *testing.T) { seedStory(t, c) })
	t.Run("pods-deleted", func(t *testing.T) {
		runWhileDeleting(t, c, aux, "istio-aux-webhook", aux.Watcher(), "proxy-quit", "istio-aux-nats")
	})
}

// checkInstalled: knative.dev/pkg issued the webhook's certificate in the
// cluster and put its CA in the configuration it reconciles; every
// component runs from an image the node pulled from its registry, as the
// non-root user the manifests ask for.
func checkInstalled(t *testing.T, c *cluster.Cluster, aux *istioaux.Installed) {
	t.Helper()
	ctx := context.Background()
	secret, err := c.Client().CoreV1().Secrets(istioaux.SystemNamespace).Get(ctx, "istio-aux-webhook-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mwc, err := c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-aux-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca := secret.Data["ca-cert.pem"]
	for _, w := range mwc.Webhooks {
		if len(ca) == 0 || string(w.ClientConfig.CABundle) != string(ca) || w.ClientConfig.Service == nil {
			t.Errorf("webhook %s: caBundle %d bytes, the Secret's CA %d bytes, service %v: the certificate was not issued and reconciled in-cluster",
				w.Name, len(w.ClientConfig.CABundle), len(ca), w.ClientConfig.Service)
		}
	}
	pods, err := c.Client().CoreV1().Pods(istioaux.SystemNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue // e.g. the function's pod, scaled to zero, draining
		}
		for _, ctr := range p.Spec.Containers {
			s := cluster.ContainerStatus(&p, ctr.Name)
			// istio-aux's images, and Knative's queue-proxy beside the
			// function: all built by ko into the node's registry.
			if !strings.HasPrefix(ctr.Image, realnode.RegistryAddr+"/istio-aux/") && !strings.HasPrefix(ctr.Image, realnode.RegistryAddr+"/knative/queue@") ||
				!strings.Contains(ctr.Image, "@sha256:") || s.State.Running == nil {
				t.Errorf("%s/%s: image %s, state %+v: want a running image built by ko into the node's registry", p.Name, ctr.Name, ctr.Image, s.State)
			}
		}
	}
	t.Logf("installed from %s: %s", aux.Dir(), c.PodsSummary(ctx, istioaux.SystemNamespace, ""))
}

// seedStory is the reference implementation's demo as a user runs it: a
// 2-worker Job with restartPolicy OnFailure whose app downloads its dataset
// through the proxy at start, in a namespace with Istio's injection and the
// reference's own opt-in label, no serviceAccountName: both pods Succeed
// with their proxy quit once, and the Job completes.
func seedStory(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	j := meshJob("mnist", 2, corev1.RestartPolicyOnFailure, worker(map[string]string{"APP_RUN_FOR": "2s"}))
	j.Spec.Template.Spec.ServiceAccountName = ""
	mesh.CreateJob(t, c, ns, j)
	if j := mesh.WaitJob(t, c, ns, "mnist", batchv1.JobComplete, 3*time.Minute); j.Status.Succeeded != 2 {
		t.Errorf("mnist: %d succeeded, want 2", j.Status.Succeeded)
	}
	for _, p := range mesh.Pods(t, c, ns, "mnist") {
		if !mesh.ProxyFirstWithHold(&p) || cluster.ContainerStatus(&p, "tensorflow").RestartCount != 0 {
			t.Errorf("%s: containers %v, app restarts %d: want the hold and a first attempt that worked",
				p.Name, mesh.ContainerNames(&p), cluster.ContainerStatus(&p, "tensorflow").RestartCount)
		}
		mesh.OneEvent(t, c, ns, p.Name, "ProxyQuit")
	}
}

// runWhileDeleting runs Jobs (jobsThrough) while it deletes, one after
// another, a pod of each of istio-aux's workloads named, as `kubectl delete
// pod` does.
func runWhileDeleting(t *testing.T, c *cluster.Cluster, aux *istioaux.Installed, deployments ...string) {
	t.Helper()
	jobsThrough(t, c, func(ctx context.Context) error {
		// The schedule of the faults: one deletion every 3 s, while the
		// Jobs run and finish.
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for _, d := range deployments {
			<-tick.C
			if err := aux.DeletePod(ctx, d); err != nil {
				return fmt.Errorf("deleting a pod of %s: %w", d, err)
			}
			t.Logf("deleted a pod of %s", d)
		}
		return nil
	})
	if err := aux.WaitAvailable(context.Background(), 2*time.Minute); err != nil {
		t.Errorf("after the deletions: %v", err)
	}
}

// jobsThrough runs Jobs while during does something to istio-aux (deletes
// its pods, upgrades it), one arriving a second as a workload's would, and
// checks each as users would: every Job completes, every pod was admitted
// with the hold, and every pod's proxy is quit exactly once. Half the apps
// fail once first (OnFailure), and a proxy quit before the retry would make
// the retry's download fail, over and over.
func jobsThrough(t *testing.T, c *cluster.Cluster, during func(context.Context) error) {
	t.Helper()
	ctx := context.Background()
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	const jobs = 8
	done := make(chan error, 1)
	go func() { done <- during(ctx) }()
	arrivals := time.NewTicker(time.Second)
	defer arrivals.Stop()
	for i := range jobs {
		<-arrivals.C
		app := map[string]string{"APP_RUN_FOR": "3s"}
		if i%2 == 1 {
			app["APP_EXIT_CODES"] = "1,0"
		}
		j := meshJob(fmt.Sprintf("job-%d", i), 1, corev1.RestartPolicyOnFailure, worker(app))
		j.Spec.Template.Spec.ServiceAccountName = ""
		mesh.CreateJob(t, c, ns, j)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		name := fmt.Sprintf("job-%d", i)
		mesh.WaitJob(t, c, ns, name, batchv1.JobComplete, 4*time.Minute)
		p := mesh.OnlyPod(t, c, ns, name)
		if !mesh.ProxyFirstWithHold(&p) {
			t.Errorf("%s: containers %v: admitted without the hold", p.Name, mesh.ContainerNames(&p))
		}
		if err := poll.Until(ctx, time.Minute, func(context.Context) (bool, error) {
			return mesh.CountEvents(mesh.Events(t, c, ns, p.Name), "ProxyQuit") > 0, nil
		}); err != nil {
			t.Errorf("%s: no ProxyQuit Event", p.Name)
			continue
		}
		mesh.OneEvent(t, c, ns, p.Name, "ProxyQuit")
		if s := cluster.ContainerStatus(&p, keys.ProxyContainer); s.RestartCount != 0 {
			t.Errorf("%s: istio-proxy restarted %d times", p.Name, s.RestartCount)
		}
	}
}
