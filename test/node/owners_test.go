//go:build e2e

package node

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/operators"
	"github.com/istio-aux/istio-aux/test/poll"
)

// The owners users run their pods through (issue 23), each to its own
// final condition on the real node with the real istiod and istio-aux as
// installed from config/: the Kubeflow training operator v1 (TFJob,
// PyTorchJob), Kubeflow Trainer v2 on JobSet (TrainJob), and the Job
// controller's own shapes (owners_jobs_test.go).

// installed are the operators installed on the shared cluster so far.
var installed struct {
	mu  sync.Mutex
	ops map[string]bool
}

// withOperators installs the operators on the shared cluster, once each
// for the whole package, in the order given.
func withOperators(t *testing.T, c *cluster.Cluster, ops ...operators.Operator) {
	t.Helper()
	installed.mu.Lock()
	defer installed.mu.Unlock()
	if installed.ops == nil {
		installed.ops = map[string]bool{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, o := range ops {
		if installed.ops[o.Name] {
			continue
		}
		if err := operators.Install(ctx, c, shared.Log(), o); err != nil {
			for _, op := range ops {
				if out, _ := kubectl(t, c, "logs", "-n", op.Namespace, "deployment/"+op.Deployment, "--tail=30"); out != "" {
					t.Logf("logs of %s:\n%s", op.Deployment, out)
				}
			}
			t.Fatal(err)
		}
		installed.ops[o.Name] = true
	}
}

// TestOwnerTFJobSeedStory is the seed's README step by step, with the
// TFJob `mnist` exactly as it writes it (only the image differs): in a
// namespace with Istio's injection on, both workers' training ends and
// their proxies keep the pods Running at 1/2, the TFJob never succeeds;
// `kubectl delete`, the namespace labelled io.datastrophic/istio-aux=enabled,
// `kubectl create` again: every pod Completed, the TFJob Succeeded.
func TestOwnerTFJobSeedStory(t *testing.T) {
	c, _ := meshCluster(t)
	withOperators(t, c, operators.TrainingOperator)
	t.Parallel()
	ns := mesh.Namespace(t, c, "", true, nil)
	ctx := context.Background()
	if err := operators.CreateWhenServed(ctx, c, ns, operators.SeedTFJob); err != nil {
		t.Fatal(err)
	}
	pods, err := operators.WaitPods(ctx, c, ns, operators.SeedWorkers, 4*time.Minute, operators.Stuck)
	if err != nil {
		t.Fatalf("without istio-aux, the workers' training did not end with their proxies running: %v", err)
	}
	for _, p := range pods {
		if _, ok := p.Annotations[keys.AnnotationProxyConfig]; ok {
			t.Errorf("%s: mutated outside the opt-in", p.Name)
		}
		// The app started before its proxy: its download failed and the
		// kubelet ran it again (OnFailure), as the seed's "Network is
		// unreachable".
		if s := cluster.ContainerStatus(&p, "tensorflow"); s.RestartCount < 1 {
			t.Errorf("%s: tensorflow restarted %d times; want a first attempt that failed its download", p.Name, s.RestartCount)
		}
		checkJoined(t, c, ns, p.Name, "tensorflow")
	}
	// And they stay so. The reads have no deadline of their own: the
	// client's rate limiter, shared by every parallel test, may hold one
	// back a while.
	if err := poll.While(ctx, 3*time.Second, func(ctx context.Context) (bool, error) {
		return operators.PodsAre(ctx, c, ns, operators.SeedWorkers, operators.Stuck)
	}); err != nil {
		t.Fatalf("the workers did not stay Running at 1/2 with only istio-proxy running: %v (%s)", err, c.PodsSummary(ctx, ns, ""))
	}
	tf, err := operators.Get(ctx, c, operators.TFJobs, ns, "mnist")
	if err != nil {
		t.Fatal(err)
	}
	if conds := operators.Conditions(tf); conds["Succeeded"] != "" || conds["Running"] == "" {
		t.Errorf("TFJob without istio-aux: conditions %v, want Running and not Succeeded", conds)
	}

	// The README's second half.
	if err := operators.DeleteSeed(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	if out, code := kubectl(t, c, "label", "namespace", ns, operators.SeedOptIn); code != 0 {
		t.Fatalf("kubectl label: %s", out)
	}
	if err := operators.CreateWhenServed(ctx, c, ns, operators.SeedTFJob); err != nil {
		t.Fatal(err)
	}
	tf, err = operators.WaitCondition(ctx, c, operators.TFJobs, ns, "mnist", "Succeeded", 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if reason := operators.Conditions(tf)["Succeeded"]; reason != "TFJobSucceeded" {
		t.Errorf("TFJob Succeeded with reason %q", reason)
	}
	// The TFJob succeeds with worker 0; worker 1 completes on its own.
	pods, err = operators.WaitPods(ctx, c, ns, operators.SeedWorkers, 2*time.Minute, operators.Completed)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		checkQuitOnce(t, c, ns, &p, "tensorflow", 0)
		checkJoined(t, c, ns, p.Name, "tensorflow")
	}
}

// checkQuitOnce checks a pod that ended with istio-aux: held until its
// proxy was up (the app's first attempt downloaded), its app exited as
// 0 after restarts restarts, its proxy quit (exit 0),
// one ProxyQuit Event.
func checkQuitOnce(t *testing.T, c *cluster.Cluster, ns string, p *corev1.Pod, app string, restarts int32) {
	t.Helper()
	if !strings.Contains(p.Annotations[keys.AnnotationProxyConfig], "holdApplicationUntilProxyStarts: true") {
		t.Errorf("%s: %s = %q, want the hold", p.Name, keys.AnnotationProxyConfig, p.Annotations[keys.AnnotationProxyConfig])
	}
	if !mesh.ProxyFirstWithHold(p) {
		t.Errorf("%s: containers %v: istio-proxy not first with its postStart wait", p.Name, mesh.ContainerNames(p))
	}
	s := cluster.ContainerStatus(p, app)
	if s.RestartCount != restarts || s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
		t.Errorf("%s: %s restarts %d, state %+v; want %d restarts and exit 0", p.Name, app, s.RestartCount, s.State, restarts)
	}
	if st := terminated(p, keys.ProxyContainer); st == nil || st.ExitCode != 0 {
		t.Errorf("%s: istio-proxy %+v, want it quit with exit 0", p.Name, cluster.ContainerStatus(p, keys.ProxyContainer).State)
	}
	mesh.OneEvent(t, c, ns, p.Name, "ProxyQuit")
}

// checkJoined checks in the container's log that the training app joined
// its group: it reached its peers by name through the cluster's DNS.
func checkJoined(t *testing.T, c *cluster.Cluster, ns, pod, container string) {
	t.Helper()
	out, code := kubectl(t, c, "logs", "-n", ns, pod, "-c", container)
	if code != 0 || !strings.Contains(out, "app: joined the group") {
		t.Errorf("%s: the training app did not join its group:\n%s", pod, out)
	}
}

// podsOf lists the pods of ns with the label selector.
func podsOf(t *testing.T, c *cluster.Cluster, ns, selector string) []corev1.Pod {
	t.Helper()
	l, err := c.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// submit submits a manifest the way a user does, through the operators'
// webhooks.
func submit(t *testing.T, c *cluster.Cluster, ns, manifest string) {
	t.Helper()
	if err := operators.CreateWhenServed(context.Background(), c, ns, []byte(manifest)); err != nil {
		t.Fatal(err)
	}
}

func fill(manifest string, kv ...string) string {
	r := strings.NewReplacer(kv...)
	return r.Replace(manifest)
}
