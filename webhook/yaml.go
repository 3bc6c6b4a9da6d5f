package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/istio-aux/istio-aux/pkg/keys"
	yaml "go.yaml.in/yaml/v3"
)

// mergeHold merges "holdApplicationUntilProxyStarts: true" into a ProxyConfig
// YAML document. It works on the yaml.Node tree so that every other key keeps
// its value, order and comments. changed is false when the user already set
// the key (any value: an explicit false is a decision, not an omission). An
// error means the document is not a single YAML mapping; the caller then
// leaves the pod alone.
func mergeHold(config string) (merged string, changed bool, err error) {
	if strings.TrimSpace(config) == "" {
		return KeyHold + ": true", true, nil
	}
	dec := yaml.NewDecoder(strings.NewReader(config))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		// Only comments: keep them and add the key below.
		return strings.TrimRight(config, "\n") + "\n" + KeyHold + ": true\n", true, nil
	case err != nil:
		return "", false, fmt.Errorf("%s is not valid YAML: %w", keys.AnnotationProxyConfig, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		// Istio reads one document; rewriting would silently drop the rest.
		return "", false, fmt.Errorf("%s holds more than one YAML document", keys.AnnotationProxyConfig)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return "", false, fmt.Errorf("%s is not a YAML mapping", keys.AnnotationProxyConfig)
	}
	// Decoding into a map also rejects duplicate keys and resolves merge
	// keys ("<<"), so "already set" means what Istio would see.
	var fields map[string]any
	if err := doc.Decode(&fields); err != nil {
		return "", false, fmt.Errorf("%s is not a valid mapping: %w", keys.AnnotationProxyConfig, err)
	}
	if _, ok := fields[KeyHold]; ok {
		return config, false, nil
	}
	root := doc.Content[0]
	spellNulls(root)
	root.Content = append(root.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: KeyHold},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"},
	)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return "", false, fmt.Errorf("re-encoding %s: %w", keys.AnnotationProxyConfig, err)
	}
	if err := enc.Close(); err != nil {
		return "", false, fmt.Errorf("re-encoding %s: %w", keys.AnnotationProxyConfig, err)
	}
	// Never hand Istio a document that does not read back as the user's
	// fields plus ours: better a warning than a silently changed setting.
	var check map[string]any
	if err := yaml.Unmarshal(buf.Bytes(), &check); err != nil || check[KeyHold] != true {
		return "", false, fmt.Errorf("%s could not be rewritten safely (%v)", keys.AnnotationProxyConfig, err)
	}
	delete(check, KeyHold)
	if !sameYAMLValue(check, fields) {
		return "", false, fmt.Errorf("%s could not be rewritten without changing it", keys.AnnotationProxyConfig)
	}
	return buf.String(), true, nil
}

// spellNulls writes implicit nulls out: an empty null scalar (the value of
// "{a}" or "a:") would otherwise be encoded as ” and turn into a string.
func spellNulls(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == "" {
		n.Value = "null"
	}
	for _, c := range n.Content {
		spellNulls(c)
	}
}

// sameYAMLValue compares decoded YAML by its canonical encoding (maps are
// encoded with sorted keys; NaN equals itself).
func sameYAMLValue(a, b any) bool {
	ea, err1 := yaml.Marshal(a)
	eb, err2 := yaml.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ea, eb)
}
