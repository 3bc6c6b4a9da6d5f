//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// TestWebhookDown stops the webhook for good (so it runs last): with
// failurePolicy Ignore pods are still created, only without the hold
// annotation, and the quit side — which never needed the webhook — still
// finishes every Job as designed.
func TestWebhookDown(t *testing.T) {
	// knative's webhook drains for longer than Stop waits, so Stop ends it
	// with SIGKILL and says so: either way it is gone.
	if err := aux.Stop(); err != nil {
		t.Log(err)
	}
	startStack(t, true)
	ns := mesh.Namespace(t, env.Client(), "webhook-down", true, map[string]string{keys.LabelEnabled: "true"})

	// A pod create now calls a webhook that refuses connections.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec:       corev1.PodSpec{ServiceAccountName: istio.ServiceAccount, Containers: []corev1.Container{{Name: app, Image: "busybox"}}},
	}
	start := time.Now()
	created, err := env.Client().CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("pod create with the webhook down: %v", err)
	}
	if v, ok := created.Annotations["proxy.istio.io/config"]; ok {
		t.Fatalf("pod mutated though the webhook is down: %q", v)
	}

	var jobs []testJob
	for i := range 6 {
		j := testJob{kind: kind(i % 3), namespace: ns, name: fmt.Sprintf("down-%d", i), runFor: 1 + i%2}
		if _, err := env.Client().BatchV1().Jobs(ns).Create(context.Background(), j.object(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	if err := cluster.Poll(context.Background(), time.Second, 3*time.Minute, func(ctx context.Context) (bool, error) {
		n, err := finished(ctx, jobs)
		return n == len(jobs), err
	}); err != nil {
		t.Fatalf("jobs not finished with the webhook down: %v", err)
	}
	f, err := verify(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.problems {
		t.Error(p)
	}
	pods, err := env.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if _, ok := p.Annotations["proxy.istio.io/config"]; ok {
			t.Errorf("%s: has the hold annotation; the webhook was not down", p.Name)
		}
		if containerStatus(&p, "istio-proxy").Name == "" {
			t.Errorf("%s: no istio-proxy; the injector did not run", p.Name)
		}
	}
	table(os.Stderr, "webhook down", [][2]string{
		{"pod create (webhook refusing)", took.Round(time.Millisecond).String()},
		{"jobs finished as designed", fmt.Sprintf("%d/%d", len(jobs)-f.wrongOutcome, len(jobs))},
		{"quits", fmt.Sprintf("%d for %d pods (early %d, never %d)", f.quits, f.optedInPods, f.early, f.neverQuit)},
	})
}
