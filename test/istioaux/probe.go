package istioaux

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/poll"
)

// ProbePod is a pod for DryRunMutated: opted in by its own label, so any
// namespace will do.
func ProbePod(namespace string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: namespace, Labels: map[string]string{keys.LabelEnabled: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
}

// HasHold reports whether a webhook added the hold (any proxy config).
func HasHold(p *corev1.Pod) bool { return p.Annotations[keys.AnnotationProxyConfig] != "" }

// DryRunMutated creates pod as a dry run and returns an error unless what
// the API server hands back, after every mutating webhook, satisfies cond:
// the one way the harness knows a webhook is serving as expected.
func DryRunMutated(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, cond func(*corev1.Pod) bool) error {
	got, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return err
	}
	if !cond(got) {
		return errors.New("a dry-run pod came back without the expected mutation")
	}
	return nil
}

// WaitMutates polls DryRunMutated with a probe pod in namespace until cond
// holds or timeout passes.
func WaitMutates(ctx context.Context, cs kubernetes.Interface, namespace string, cond func(*corev1.Pod) bool, timeout time.Duration) error {
	return poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		return DryRunMutated(ctx, cs, ProbePod(namespace), cond) == nil, nil
	})
}
