package injector

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestInject(t *testing.T) {
	cases := map[string]struct {
		annotations map[string]string
		initial     []string // existing containers
		changed     bool
		position    string
	}{
		"plain: proxy last":         {initial: []string{"app"}, changed: true, position: "last of 2"},
		"hold: proxy first":         {annotations: map[string]string{AnnotationProxy: "holdApplicationUntilProxyStarts: true\n"}, initial: []string{"app"}, changed: true, position: "hold"},
		"hold false: last":          {annotations: map[string]string{AnnotationProxy: "holdApplicationUntilProxyStarts: false"}, initial: []string{"app"}, changed: true, position: "last of 2"},
		"malformed config: last":    {annotations: map[string]string{AnnotationProxy: "{{"}, initial: []string{"app"}, changed: true, position: "last of 2"},
		"native: init container":    {annotations: map[string]string{AnnotationNative: "true"}, initial: []string{"app"}, changed: true, position: "native"},
		"inject false: skipped":     {annotations: map[string]string{AnnotationInject: "false"}, initial: []string{"app"}, position: "last of 1"},
		"already injected: skipped": {initial: []string{"app", "istio-proxy"}, position: "last of 2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}}
			for _, c := range tc.initial {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c})
			}
			before := pod.DeepCopy()
			out, changed := Inject(pod)
			if changed != tc.changed {
				t.Fatalf("changed = %v, want %v", changed, tc.changed)
			}
			if got := String(out); got != tc.position {
				t.Errorf("proxy position = %q, want %q", got, tc.position)
			}
			if changed && out.Annotations[AnnotationStatus] == "" {
				t.Error("no sidecar.istio.io/status annotation")
			}
			if len(pod.Spec.Containers) != len(before.Spec.Containers) || len(pod.Annotations) != len(before.Annotations) {
				t.Error("input pod was modified")
			}
		})
	}
}
