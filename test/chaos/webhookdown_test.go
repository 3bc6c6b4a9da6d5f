//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// TestWebhookDown stops the webhook (it runs last): with failurePolicy
// Fail, scoped to the opt-in, a pod of an opted-in namespace is refused
// rather than let in without the hold, and a pod of any other namespace is
// created as before. Jobs created meanwhile get their pods from the Job
// controller's retries once the webhook is back, every one held, and the
// quit side finishes them as designed.
func TestWebhookDown(t *testing.T) {
	// knative's webhook drains for longer than Stop waits, so Stop ends it
	// with SIGKILL and says so: either way it is gone.
	if err := aux.Stop(); err != nil {
		t.Log(err)
	}
	startStack(t, true)
	ns := mesh.Namespace(t, env, "", true, mesh.OptedIn)
	other := mesh.Namespace(t, env, "-not-opted-in", true, nil)

	// A pod create now calls a webhook that refuses connections.
	probe := func(ns string) (*corev1.Pod, time.Duration, error) {
		pod := mesh.Pod(ns, "probe", "", "", corev1.Container{Name: app, Image: "busybox"})
		pod.Spec.ServiceAccountName = istio.ServiceAccount
		start := time.Now()
		created, err := env.Client().CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return created, time.Since(start), err
	}
	if _, took, err := probe(ns); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("an opted-in pod's create with the webhook down: %v after %v, want it refused by the webhook's failure policy", err, took)
	}
	created, took, err := probe(other)
	if err != nil {
		t.Fatalf("a pod outside the opt-in, with the webhook down: %v", err)
	}
	if v, ok := created.Annotations[keys.AnnotationProxyConfig]; ok {
		t.Fatalf("a pod outside the opt-in was mutated: %q", v)
	}

	var jobs []testJob
	for i := range 6 {
		j := testJob{kind: kind(i % 3), namespace: ns, name: fmt.Sprintf("down-%d", i), runFor: 1 + i%2}
		mesh.CreateJob(t, env, ns, j.object())
		jobs = append(jobs, j)
	}
	// The Job controller tries, and is refused, while the webhook is down.
	mesh.WaitEvent(t, env, ns, jobs[0].name, "FailedCreate")
	if pods := podsIn(t, ns); len(pods) > 0 {
		t.Fatalf("%d pods created with the webhook down", len(pods))
	}
	down := time.Now()
	if err := aux.StartWebhook(context.Background()); err != nil {
		t.Fatal(err)
	}
	backIn := time.Since(down)
	if err := poll.Until(context.Background(), 4*time.Minute, func(ctx context.Context) (bool, error) {
		n, err := finished(ctx, jobs)
		return n == len(jobs), err
	}); err != nil {
		t.Fatalf("jobs not finished once the webhook was back: %v", err)
	}
	f := verify(t, jobs, [2]time.Time{})
	for _, p := range f.problems {
		t.Error(p)
	}
	for _, p := range podsIn(t, ns) {
		if !istioaux.HasHold(&p) {
			t.Errorf("%s: no hold annotation: let in while the webhook was down", p.Name)
		}
		if cluster.ContainerStatus(&p, keys.ProxyContainer).Name == "" {
			t.Errorf("%s: no istio-proxy; the injector did not run", p.Name)
		}
	}
	table(os.Stderr, "webhook down", [][2]string{
		{"pod create outside the opt-in (webhook refusing)", took.Round(time.Millisecond).String()},
		{"webhook back (started, mutating)", backIn.Round(time.Millisecond).String()},
		{"jobs finished as designed", fmt.Sprintf("%d/%d", len(jobs)-f.wrongOutcome, len(jobs))},
		{"quits", fmt.Sprintf("%d for %d pods (early %d, never %d)", f.quits, f.optedInPods, f.early, f.neverQuit)},
	})
}

func podsIn(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	l, err := env.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}
