// Package admissiontest holds the pods the webhook's tests admit, shared by
// package admission's tests and package webhook's.
package admissiontest

import (
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// The labels of a namespace opted in, and of one opted in the legacy way.
var (
	EnabledNS = map[string]string{keys.LabelEnabled: "true"}
	LegacyNS  = map[string]string{keys.LegacyLabel: keys.LegacyLabelValue}
)

// Pod is a TFJob worker's pod as its operator creates it, with the given
// labels and annotations (either may be nil).
func Pod(labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mnist-worker-0", Namespace: "kubeflow", Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyOnFailure,
			Containers:    []corev1.Container{{Name: "tensorflow", Image: "mnist"}},
		},
	}
}

// RawAnnotations decodes every annotation of an object (the webhook's decoding keeps
// only those Mutate reads).
func RawAnnotations(t testing.TB, raw []byte) map[string]string {
	t.Helper()
	var v struct {
		Metadata *struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &v); err != nil {
		t.Fatalf("annotations of %s: %v", raw, err)
	}
	if v.Metadata == nil {
		return nil
	}
	return v.Metadata.Annotations
}

// AnnotationsAfter applies a JSON patch to raw and returns the
// annotations of the patched pod.
func AnnotationsAfter(t testing.TB, raw, patch []byte) map[string]string {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("DecodePatch(%s): %v", patch, err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("patch %s does not apply to %s: %v", patch, raw, err)
	}
	// Decode as the API server does (case-sensitive), like the webhook.
	var after corev1.Pod
	if err := kjson.UnmarshalCaseSensitivePreserveInts(out, &after); err != nil {
		t.Fatalf("patched object is not a pod: %v", err)
	}
	return after.Annotations
}

// Called is the names of the webhooks the API server calls for a pod with
// podLabels in a namespace with nsLabels: those whose namespace and object
// selectors both match (an absent selector matches everything).
func Called(tb testing.TB, webhooks []admissionregistrationv1.MutatingWebhook, nsLabels, podLabels map[string]string) []string {
	tb.Helper()
	matches := func(sel *metav1.LabelSelector, l map[string]string) bool {
		if sel == nil {
			return true
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			tb.Fatal(err)
		}
		return s.Matches(labels.Set(l))
	}
	var out []string
	for _, wh := range webhooks {
		if matches(wh.NamespaceSelector, nsLabels) && matches(wh.ObjectSelector, podLabels) {
			out = append(out, wh.Name)
		}
	}
	return out
}
