package watch_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/bridge/watch"
)

// The bridge once cached every label and annotation of every pod it
// watched, though it reads one of each: a namespace of heavily labelled
// pods grew its memory without bound. Now what it caches per pod does not
// depend on them.
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
	perPod := func(labelled bool) (cached, input float64) {
		base := heap()
		in := make([]*corev1.Pod, pods)
		for i := range in {
			in[i] = pod(i, labelled)
		}
		input = float64(int64(heap())-int64(base)) / pods
		out := make([]any, pods)
		for i, p := range in {
			var err error
			if out[i], err = watch.PackTransform(p); err != nil {
				t.Fatal(err)
			}
		}
		in = nil
		cached = float64(int64(heap())-int64(base)) / pods
		runtime.KeepAlive(out)
		return cached, input
	}
	plain, _ := perPod(false)
	labelled, labelledInput := perPod(true)
	t.Logf("cached per pod: %.0f B plain, %.0f B with %d labels and %d annotations (the pod itself: %.0f B)",
		plain, labelled, labels, labels, labelledInput)
	if labelled > plain+64 {
		t.Errorf("labels grow the cache: %.0f B/pod labelled, %.0f B/pod plain", labelled, plain)
	}
}
