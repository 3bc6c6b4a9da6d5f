package watch

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The bridge once cached every label and annotation of every pod it
// watched, though it reads one of each: a namespace of heavily labelled
// pods grew its memory without bound. Now what it caches per pod does not
// depend on them: each labelled pod packs to what the same pod without
// them packs to, holding the same bytes (heapBytes) and none of its
// labels' or annotations' memory. The heap the packed pods retain is
// measured too, and logged, not bounded: a live-heap difference moves with
// what else the process allocates or frees meanwhile.
func TestLabelsCostTheCacheNothing(t *testing.T) {
	const pods, labels = 1000, 200
	pod := func(i int, labelled bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: "ns", UID: "u",
				Labels: map[string]string{"istio-aux.dev/enabled": "true"}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "app"}, {Name: "istio-proxy"}}},
		}
		if labelled {
			p.Annotations = map[string]string{}
			for j := range labels {
				v := fmt.Sprintf("%d-%d-%s", i, j, strings.Repeat("v", 50)) // 63 characters at most
				p.Labels[fmt.Sprintf("example.com/label-%d", j)] = v
				p.Annotations[fmt.Sprintf("example.com/note-%d", j)] = v
			}
		}
		return p
	}
	pack := func(p *corev1.Pod) *Packed {
		t.Helper()
		obj, err := PackTransform(p)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*Packed)
	}
	for i := range pods {
		labelled, plain := pod(i, true), pack(pod(i, false))
		c := pack(labelled)
		if field := metadataHeld(c, labelled); field != "" {
			t.Fatalf("pod %d: the packed pod holds its metadata: %s", i, field)
		}
		if c.heapBytes() != plain.heapBytes() || c.Units() != plain.Units() {
			t.Fatalf("pod %d: packed, it holds %d B (%d pods) labelled, %d B (%d) plain", i, c.heapBytes(), c.Units(), plain.heapBytes(), plain.Units())
		}
		if d := cmp.Diff(plain.Unpack(), c.Unpack()); d != "" {
			t.Fatalf("pod %d: the labels changed what is cached (-plain +labelled):\n%s", i, d)
		}
	}

	perPod := func(labelled bool) (cached, input float64) {
		base := liveHeap()
		in := make([]*corev1.Pod, pods)
		for i := range in {
			in[i] = pod(i, labelled)
		}
		input = float64(int64(liveHeap())-int64(base)) / pods
		out := make([]any, pods)
		for i, p := range in {
			out[i] = pack(p)
		}
		// in is dead here (Go's liveness is precise): the heap below holds
		// the packed pods alone.
		cached = float64(int64(liveHeap())-int64(base)) / pods
		runtime.KeepAlive(out)
		return cached, input
	}
	plain, _ := perPod(false)
	labelled, labelledInput := perPod(true)
	t.Logf("measured, cached per pod: %.0f B plain, %.0f B with %d labels and %d annotations (the pod itself: %.0f B); heapBytes: %d B",
		plain, labelled, labels, labels, labelledInput, pack(pod(0, false)).heapBytes())
}
