package webhook

import (
	"context"
	"encoding/json"
	"testing"

	"go.uber.org/zap"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/webhook/admission/admissiontest"
)

// BenchmarkAdmit measures in-process admission latency (the review's
// decoding, namespace lookup, mutation, patch, the answer's encoding) for a
// TFJob-like worker pod. `make bench`.
func BenchmarkAdmit(b *testing.B) {
	fx := newFixture(b, nil,
		namespace("ml", map[string]string{keys.LabelEnabled: "true"}),
		namespace("plain", nil))
	ctx := logging.WithLogger(context.Background(), zap.NewNop().Sugar())
	cases := map[string]struct {
		ns          string
		annotations map[string]string
	}{
		"hold/new-annotation": {ns: "ml"},
		"hold/merge-config":   {ns: "ml", annotations: map[string]string{keys.AnnotationProxyConfig: "concurrency: 2\ntracing:\n  sampling: 10\n"}},
		"skip/not-opted-in":   {ns: "plain"},
		"skip/user-set-hold":  {ns: "ml", annotations: map[string]string{keys.AnnotationProxyConfig: "holdApplicationUntilProxyStarts: false"}},
	}
	for name, tc := range cases {
		b.Run(name, func(b *testing.B) {
			body := reviewBody(b, benchRequest(b, tc.ns, tc.annotations))
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				reviewOK(b, ctx, fx.r, body)
			}
		})
	}
}

func benchRequest(b *testing.B, ns string, annotations map[string]string) *admissionv1.AdmissionRequest {
	pod := admissiontest.Pod(map[string]string{
		"training.kubeflow.org/job-name": "mnist", "training.kubeflow.org/replica-type": "worker",
		"training.kubeflow.org/replica-index": "0", "training.kubeflow.org/operator-name": "tfjob-controller",
	}, annotations)
	pod.Spec.Containers[0] = corev1.Container{
		Name: "tensorflow", Image: "kubeflow/tf-mnist-with-summaries:latest",
		Command: []string{"python", "-u", "mnist.py"},
		Env:     []corev1.EnvVar{{Name: "TF_CONFIG", Value: `{"cluster":{"worker":["mnist-worker-0.kubeflow.svc:2222","mnist-worker-1.kubeflow.svc:2222"]},"task":{"type":"worker","index":0}}`}},
		Ports:   []corev1.ContainerPort{{Name: "tfjob-port", ContainerPort: 2222}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi"),
		}},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	req := podRequest(b, ns, nil, nil)
	req.Object.Raw = raw
	return req
}
