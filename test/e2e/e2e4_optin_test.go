//go:build e2e

package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
	"github.com/istio-aux/istio-aux/test/scenario"
)

// Test7OptedInAfterItsPodsFinished: a Job's pod finishes its app in a
// namespace that is not opted in (the webhook does not label it: the bridge
// never sees it); the namespace is labelled afterwards, and the pod gets its
// quit at once: the bridge lists the namespace's pods without the webhook's
// label and evaluates them.
func Test7OptedInAfterItsPodsFinished(t *testing.T) {
	withIstioAux(t)
	ns := mesh.Namespace(t, env, "", true, nil)
	onePodJob(t, ns, "late", "1s")
	waitStuck(t, ns, "late")
	if q := quitsIn(t, ns); len(q) != 0 {
		t.Fatalf("quit before the namespace was opted in: %v", q)
	}
	mesh.Relabel(t, env, ns, map[string]any{keys.LabelEnabled: "true"})
	mesh.WaitJob(t, env, ns, "late", batchv1.JobComplete, 30*time.Second)
	mesh.WaitEvent(t, env, ns, mesh.OnlyPod(t, env, ns, "late").Name, "ProxyQuit")
}

// Test8OptedOutStopsItsQuits: a namespace's label is removed while its
// Job's app still runs; the bridge stops serving it, and the pod is left
// stuck when its app finishes (no quit), as in a namespace never opted in.
func Test8OptedOutStopsItsQuits(t *testing.T) {
	withIstioAux(t)
	ns := mesh.Namespace(t, env, "", true, mesh.OptedIn)
	onePodJob(t, ns, "dropped", "6s")
	poll.Eventually(t, 30*time.Second, "app running", func(ctx context.Context) (bool, error) {
		pods := mesh.Pods(t, env, ns, "dropped")
		return len(pods) == 1 && cluster.ContainerStatus(&pods[0], scenario.App).State.Running != nil, nil
	})
	mesh.Relabel(t, env, ns, map[string]any{keys.LabelEnabled: nil})
	waitStuck(t, ns, "dropped")
	poll.Consistently(t, 5*time.Second, "pod left alone", func(ctx context.Context) (bool, error) {
		pods := mesh.Pods(t, env, ns, "dropped")
		return len(pods) == 1 && mesh.Stuck(&pods[0], scenario.App) && len(quitsIn(t, ns)) == 0, nil
	})
}

// onePodJob is the demo's Job with one worker, its app running for runFor
// and exiting 0.
func onePodJob(t *testing.T, ns, name, runFor string) {
	t.Helper()
	j := mesh.TrainingJob(name, 1, corev1.RestartPolicyNever, mesh.App{RunFor: runFor}, nil)
	j.Spec.BackoffLimit = ptr.To(int32(0))
	mesh.CreateJob(t, env, ns, j)
}

// waitStuck waits until the Job's one pod has its app done and its proxy
// running.
func waitStuck(t *testing.T, ns, job string) {
	t.Helper()
	poll.Eventually(t, 30*time.Second, "app done, proxy running", func(ctx context.Context) (bool, error) {
		pods := mesh.Pods(t, env, ns, job)
		return len(pods) == 1 && mesh.Stuck(&pods[0], scenario.App), nil
	})
}

// Test9MissedByTheWebhook: a Job's pod in an opted-in namespace that lacks
// the webhook's label istio-aux.dev/watched (the webhook was not called: a
// failure policy of Ignore while it was down) never reaches the bridge's
// cluster-wide watch; the sweep, once a resync period, finds it, and it
// gets its quit within that bound (docs/design.md, "What the bridge
// watches"). The resync is set to just above its minimum for the test.
func Test9MissedByTheWebhook(t *testing.T) {
	const resync = 2*time.Minute + time.Second
	a := withIstioAux(t)
	restart := func(env []string) {
		t.Helper()
		if err := a.StopBridge(); err != nil {
			t.Fatal(err)
		}
		a.BridgeEnv = env
		if err := a.StartBridge(); err != nil {
			t.Fatal(err)
		}
	}
	saved := a.BridgeEnv
	restart(append(slices.Clone(saved), "ISTIO_AUX_RESYNC="+resync.String()))
	t.Cleanup(func() { restart(saved) })
	started := time.Now()

	ns := mesh.Namespace(t, env, "", true, mesh.OptedIn)
	onePodJob(t, ns, "missed", "8s")
	var pod string
	poll.Eventually(t, 30*time.Second, "the Job's pod", func(ctx context.Context) (bool, error) {
		pods := mesh.Pods(t, env, ns, "missed")
		if len(pods) == 1 {
			pod = pods[0].Name
		}
		return pod != "", nil
	})
	// What the webhook would not have written.
	patch := []byte(`{"metadata":{"labels":{"` + keys.LabelWatched + `":null}}}`)
	if _, err := env.Client().CoreV1().Pods(ns).Patch(context.Background(), pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStuck(t, ns, "missed")
	if q := quitsIn(t, ns); len(q) != 0 {
		t.Fatalf("quit before the sweep could have found it: %v", q)
	}
	// The sweep after the bridge's start comes one resync period after it.
	mesh.WaitJob(t, env, ns, "missed", batchv1.JobComplete, time.Until(started.Add(resync+45*time.Second)))
	mesh.WaitEvent(t, env, ns, pod, "ProxyQuit")
	t.Logf("quit %v after the bridge started (resync %v)", time.Since(started).Round(time.Second), resync)
}
