package slim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// KeptLabels and KeptAnnotations are the only labels and annotations a slim
// pod holds: the ones the opt-in rule and the decision read. Other labels
// and annotations (often large: last-applied-configuration, Istio's status
// blobs) are dropped on every path, JSON decoding included.
var (
	KeptLabels      = []string{keys.LabelEnabled}
	KeptAnnotations = []string{keys.AnnotationEnabled, keys.AnnotationSidecars}
)

// Kept is a label or annotation map that holds only the keys istio-aux reads.
type Kept map[string]string

// UnmarshalJSON keeps only the keys of KeptLabels and KeptAnnotations (both
// maps read the same way; each is filled only with what its pod carries)
// and allocates nothing for the others beyond the decoder's own tokens.
func (k *Kept) UnmarshalJSON(data []byte) error {
	*k = nil
	if isNull(data) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		key, err := stringToken(dec)
		if err != nil {
			return err
		}
		value, err := stringToken(dec)
		if err != nil {
			return fmt.Errorf("value of %q: %w", key, err)
		}
		if slices.Contains(KeptLabels, key) || slices.Contains(KeptAnnotations, key) {
			if *k == nil {
				*k = Kept{}
			}
			(*k)[key] = value
		}
	}
	return nil
}

// keep copies the kept keys of m; nil when none is there.
func keep(m map[string]string, kept []string) Kept {
	var out Kept
	for _, k := range kept {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(Kept, len(kept))
			}
			out[k] = v
		}
	}
	return out
}

// AnnotatedSidecars returns the container names the pod's sidecars
// annotation lists ("vault-agent, fluent-bit"): trimmed, without blanks or
// repeats, in the annotation's order, at most MaxSidecars of them. It reads
// the annotation lazily, so a huge value costs no more than its first names.
func (p *Pod) AnnotatedSidecars() []string {
	var names []string
	for n := range strings.SplitSeq(p.Annotations[keys.AnnotationSidecars], ",") {
		if len(names) == MaxSidecars {
			break
		}
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}
