package watch

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/pkg/keys"
)

// watchedPod is a pod of namespace "ns" at resourceVersion rv, labelled as
// the cluster-wide watch selects it unless watched says otherwise.
func watchedPod(name, rv string, watched ...string) *corev1.Pod {
	value := "true"
	if len(watched) > 0 {
		value = watched[0]
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: rv,
		Labels: map[string]string{keys.LabelWatched: value}}}
}

// TestCatchUpKeepsOnlyWhatTheWatchHasNotSeen: a namespace comes into scope
// and its labelled pods are listed while the cluster-wide watch goes on. A
// listed state never replaces what the watch brought since (newer), nor
// brings back a pod the watch saw deleted or leave its selection (the list
// may be older than that), nor a pod the scope no longer admits; a relist
// meanwhile read the new scope and ends the catch-up.
func TestCatchUpKeepsOnlyWhatTheWatchHasNotSeen(t *testing.T) {
	w := New(Lists{}, nil, metrics.NewBridge(nil), Options{})
	s := w.labelled
	w.setScope("ns", ScopeAll)
	if w.catchUps.Len() != 0 {
		t.Fatal("a catch-up before the first list, which reads the scopes itself")
	}
	if err := s.Replace(nil, ""); err != nil {
		t.Fatal(err)
	}
	w.setScope("ns", ScopeNone)
	w.setScope("ns", ScopeAll)
	if w.catchUps.Len() != 1 {
		t.Fatalf("%d catch-ups queued, want 1", w.catchUps.Len())
	}
	rv := func(name string) string {
		if p, ok := s.get("ns/" + name); ok {
			return p.ResourceVersion()
		}
		return "gone"
	}

	c, end := s.beginCatchUp("ns")
	_ = s.Add(watchedPod("updated", "5"))
	_ = s.Delete(watchedPod("deleted", "6"))
	_ = s.Add(watchedPod("unlabelled", "5"))
	_ = s.Update(watchedPod("unlabelled", "7", "false"))
	for _, p := range []*corev1.Pod{watchedPod("updated", "4"), watchedPod("deleted", "4"), watchedPod("unlabelled", "4"), watchedPod("listed", "4")} {
		if err := s.caught(c, p); err != nil {
			t.Fatal(err)
		}
	}
	end()
	for name, want := range map[string]string{"updated": "5", "deleted": "gone", "unlabelled": "gone", "listed": "4"} {
		if got := rv(name); got != want {
			t.Errorf("%s: resourceVersion %s, want %s", name, got, want)
		}
	}
	if w.CachedPods() != 2 {
		t.Errorf("%d pods counted, want 2", w.CachedPods())
	}

	// A relist during a catch-up.
	c, end = s.beginCatchUp("ns")
	if err := s.Replace([]any{watchedPod("relisted", "8")}, ""); err != nil {
		t.Fatal(err)
	}
	_ = s.caught(c, watchedPod("listed-before", "7"))
	end()
	if rv("listed-before") != "gone" || rv("relisted") != "8" || w.CachedPods() != 1 {
		t.Errorf("after a relist: listed-before %s, relisted %s, %d pods; want gone, 8, 1", rv("listed-before"), rv("relisted"), w.CachedPods())
	}

	// The namespace leaves the scope during a catch-up.
	c, end = s.beginCatchUp("ns")
	w.setScope("ns", ScopeNone)
	_ = s.caught(c, watchedPod("late", "9"))
	end()
	if rv("relisted") != "gone" || rv("late") != "gone" || w.CachedPods() != 0 {
		t.Errorf("out of scope: relisted %s, late %s, %d pods; want none", rv("relisted"), rv("late"), w.CachedPods())
	}
}
