package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// decodePod decodes what the mutation reads of an admission object, the
// way the API server reads JSON: case-sensitive field names. (encoding/json
// would also accept "Metadata", and a patch built from that pod would not
// apply to the raw object.) It decodes into a view of those fields only:
// the API server has validated the rest, and decoding a whole Pod (its
// containers, env, volumes) was most of the webhook's CPU per request. Of
// the annotations it unquotes only the ones Mutate reads (readAnnotations),
// and the proxy config only up to MaxProxyConfigBytes+utf8.UTFMax bytes:
// a longer one is over mergeHold's limit whatever the rest of it says. It
// also reports which parents of the annotations map exist in the raw JSON,
// because a JSON patch can only add a key to an object that is there.
func decodePod(raw []byte) (*corev1.Pod, shape, error) {
	var v *podView
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return nil, shape{}, fmt.Errorf("object is not a Pod: %w", err)
		}
		return nil, shape{}, fmt.Errorf("object is not a JSON object: %w", err)
	}
	if v == nil {
		return nil, shape{}, errors.New("object is null")
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: v.Spec.HostNetwork}}
	var s shape
	if m := v.Metadata; m != nil {
		s.metadata = true
		pod.Name, pod.GenerateName, pod.Namespace, pod.Labels = m.Name, m.GenerateName, m.Namespace, m.Labels
		if m.Annotations != nil {
			s.annotations = true
			pod.Annotations = make(map[string]string, len(readAnnotations))
			for _, k := range readAnnotations {
				lit, ok := (*m.Annotations)[k]
				if !ok {
					continue
				}
				limit := math.MaxInt
				if k == keys.AnnotationProxyConfig {
					limit = MaxProxyConfigBytes + utf8.UTFMax
				}
				value, _, err := lit.value(limit)
				if err != nil {
					return nil, shape{}, fmt.Errorf("object is not a JSON object: annotation %s: %w", k, err)
				}
				pod.Annotations[k] = value
			}
		}
	}
	if n := len(v.Spec.InitContainers); n > 0 {
		pod.Spec.InitContainers = make([]corev1.Container, n)
		for i, c := range v.Spec.InitContainers {
			pod.Spec.InitContainers[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy}
		}
	}
	return pod, s, nil
}

// readAnnotations are the annotations Mutate reads.
var readAnnotations = []string{
	keys.AnnotationEnabled, keys.KeyInject, keys.AnnotationNativeSidecar, keys.AnnotationProxyConfig,
}

// podView is every field of a Pod that Mutate reads (see decodePod).
type podView struct {
	Metadata *struct {
		Name         string                 `json:"name"`
		GenerateName string                 `json:"generateName"`
		Namespace    string                 `json:"namespace"`
		Labels       map[string]string      `json:"labels"`
		Annotations  *map[string]jsonString `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		HostNetwork    bool `json:"hostNetwork"`
		InitContainers []struct {
			Name          string                         `json:"name"`
			RestartPolicy *corev1.ContainerRestartPolicy `json:"restartPolicy"`
		} `json:"initContainers"`
	} `json:"spec"`
}

// shape says which of /metadata and /metadata/annotations exist (non-null)
// in the raw object.
type shape struct{ metadata, annotations bool }

// annotationPatch is the minimal JSON patch (RFC 6902) that sets one
// annotation and touches nothing else. "add" on an existing member replaces
// it, so it serves for both a new and an existing key.
func annotationPatch(s shape, key, value string) ([]byte, error) {
	op := addOp{Op: "add"}
	switch {
	case s.annotations:
		op.Path, op.Value = "/metadata/annotations/"+escapePointer(key), value
	case s.metadata:
		op.Path, op.Value = "/metadata/annotations", map[string]string{key: value}
	default:
		op.Path, op.Value = "/metadata", map[string]any{"annotations": map[string]string{key: value}}
	}
	b, err := json.Marshal([1]addOp{op})
	if err != nil {
		return nil, fmt.Errorf("encoding patch: %w", err)
	}
	return b, nil
}

// addOp is one JSON patch "add" operation. A plain struct, not
// jsonpatch.Operation: its MarshalJSON builds the object through fmt and a
// second json.Marshal, and encoding/json then re-scans what it returns;
// the same bytes from this struct make Admit about 10% cheaper
// (BenchmarkAdmit).
type addOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// escapePointer escapes a JSON pointer reference token (RFC 6901): "~" first,
// then "/", or "~1" written by the user would turn into "/".
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
