package webhook

import (
	"encoding/json"
	"fmt"
	"strings"
)

// annotationPatch is the minimal JSON patch (RFC 6902) that sets one
// annotation and touches nothing else. "add" on an existing member replaces
// it, so it serves for both a new and an existing key. A JSON patch can only
// add a member to an object that is there, so the operation depends on which
// of the object's metadata and annotations exist (s).
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
