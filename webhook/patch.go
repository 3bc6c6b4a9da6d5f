package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
)

// decodePod decodes an admission object the way the API server reads JSON:
// case-sensitive field names. (encoding/json would also accept "Metadata",
// and a patch built from that pod would not apply to the raw object.)
// It also reports which parents of the annotations map exist in the raw
// JSON, because a JSON patch can only add a key to an object that is there.
func decodePod(raw []byte) (*corev1.Pod, shape, error) {
	var top map[string]json.RawMessage
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &top); err != nil {
		return nil, shape{}, fmt.Errorf("object is not a JSON object: %w", err)
	}
	if top == nil {
		return nil, shape{}, errors.New("object is null")
	}
	pod := &corev1.Pod{}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, pod); err != nil {
		return nil, shape{}, fmt.Errorf("object is not a Pod: %w", err)
	}
	var s shape
	if m, ok := top["metadata"]; ok && !isNull(m) {
		s.metadata = true
		var meta map[string]json.RawMessage
		if err := kjson.UnmarshalCaseSensitivePreserveInts(m, &meta); err != nil {
			return nil, shape{}, fmt.Errorf("metadata is not a JSON object: %w", err)
		}
		if a, ok := meta["annotations"]; ok && !isNull(a) {
			s.annotations = true
		}
	}
	return pod, s, nil
}

// shape says which of /metadata and /metadata/annotations exist (non-null)
// in the raw object.
type shape struct{ metadata, annotations bool }

func isNull(m json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(m), []byte("null")) }

// annotationPatch is the minimal JSON patch (RFC 6902) that sets one
// annotation and touches nothing else. "add" on an existing member replaces
// it, so it serves for both a new and an existing key.
func annotationPatch(s shape, key, value string) ([]byte, error) {
	var op jsonpatch.Operation
	switch {
	case s.annotations:
		op = jsonpatch.NewOperation("add", "/metadata/annotations/"+escapePointer(key), value)
	case s.metadata:
		op = jsonpatch.NewOperation("add", "/metadata/annotations", map[string]string{key: value})
	default:
		op = jsonpatch.NewOperation("add", "/metadata", map[string]any{"annotations": map[string]string{key: value}})
	}
	b, err := json.Marshal([]jsonpatch.Operation{op})
	if err != nil {
		return nil, fmt.Errorf("encoding patch: %w", err)
	}
	return b, nil
}

// escapePointer escapes a JSON pointer reference token (RFC 6901): "~" first,
// then "/", or "~1" written by the user would turn into "/".
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
