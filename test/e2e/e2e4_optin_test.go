//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// Test7OptedInAfterItsPodsFinished: a Job's pod finishes its app in a
// namespace that is not opted in (the bridge watches none of its pods);
// the namespace is labelled afterwards, and the pod gets its quit at once:
// the bridge starts the namespace's pod watch and evaluates what it lists.
func Test7OptedInAfterItsPodsFinished(t *testing.T) {
	withIstioAux(t)
	ns := namespace(t, nil)
	createOnePodJob(t, ns, "late", "1s")
	waitStuck(t, ns, "late")
	if q := quitsIn(t, ns); len(q) != 0 {
		t.Fatalf("quit before the namespace was opted in: %v", q)
	}
	relabel(t, ns, optedIn)
	waitJob(t, ns, "late", "Complete", 30*time.Second)
	waitEvent(t, ns, jobPods(t, ns, "late")[0].Name, "ProxyQuit")
}

// Test8OptedOutStopsItsQuits: a namespace's label is removed while its
// Job's app still runs; the bridge stops watching it, and the pod is left
// stuck when its app finishes (no quit), as in a namespace never opted in.
func Test8OptedOutStopsItsQuits(t *testing.T) {
	withIstioAux(t)
	ns := namespace(t, optedIn)
	createOnePodJob(t, ns, "dropped", "6s")
	eventually(t, 30*time.Second, "app running", func(ctx context.Context) (bool, error) {
		pods := jobPods(t, ns, "dropped")
		return len(pods) == 1 && containerStatus(&pods[0], "tensorflow").State.Running != nil, nil
	})
	relabel(t, ns, nil)
	waitStuck(t, ns, "dropped")
	consistently(t, 5*time.Second, "pod left alone", func(ctx context.Context) (bool, error) {
		pods := jobPods(t, ns, "dropped")
		return len(pods) == 1 && stuck(&pods[0]) && len(quitsIn(t, ns)) == 0, nil
	})
}

// relabel sets (labels) or removes (nil) istio-aux's namespace label.
func relabel(t *testing.T, ns string, labels map[string]string) {
	t.Helper()
	var value any // null removes the label
	if v, ok := labels[keys.LabelEnabled]; ok {
		value = v
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{keys.LabelEnabled: value}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client().CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
