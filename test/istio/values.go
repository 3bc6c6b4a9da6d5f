package istio

// Helm's values are nested maps; these walk, merge and copy them.

// mapAt walks nested maps; a missing or non-map step gives an empty map.
func mapAt(m map[string]any, path ...string) map[string]any {
	for _, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			return map[string]any{}
		}
		m = next
	}
	if m == nil {
		return map[string]any{}
	}
	return m
}

// mergeInto merges src into dst as helm merges --set values: maps key by
// key, anything else replaces.
func mergeInto(dst, src map[string]any) {
	for k, sv := range src {
		if sm, ok := sv.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeInto(dm, sm)
				continue
			}
		}
		dst[k] = sv
	}
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = deepCopy(e)
		}
		return out
	case nil:
		return map[string]any{}
	default:
		return v
	}
}
