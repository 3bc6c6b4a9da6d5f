package admission

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// patchFor is the minimal JSON patch (RFC 6902) for a mutation: the
// annotation to set (if any) and the label keys.LabelWatched=true (if
// m.Label), touching nothing else. "add" on an existing member replaces it,
// so it serves for both a new and an existing key. A JSON patch can only add
// a member to an object that is there, so each operation depends on which of
// the object's metadata, annotations and labels exist (s); without metadata,
// one operation adds it with both maps. Nil when there is nothing to set.
func patchFor(s shape, m Mutation) ([]byte, error) {
	var ops []addOp
	var meta map[string]any
	set := func(exists bool, field, key, value string) {
		switch {
		case exists:
			ops = append(ops, addOp{"add", "/metadata/" + field + "/" + escapePointer(key), value})
		case s.metadata:
			ops = append(ops, addOp{"add", "/metadata/" + field, map[string]string{key: value}})
		default:
			if meta == nil {
				meta = map[string]any{}
			}
			meta[field] = map[string]string{key: value}
		}
	}
	if m.Key != "" {
		set(s.annotations, "annotations", m.Key, m.Value)
	}
	if m.Label {
		set(s.labels, "labels", keys.LabelWatched, "true")
	}
	if meta != nil {
		ops = append(ops, addOp{"add", "/metadata", meta})
	}
	if len(ops) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(ops)
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
