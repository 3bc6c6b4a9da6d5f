package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

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
		return "", false, fmt.Errorf("%s is not valid YAML: %w", AnnotationProxyConfig, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		// Istio reads one document; rewriting would silently drop the rest.
		return "", false, fmt.Errorf("%s holds more than one YAML document", AnnotationProxyConfig)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return "", false, fmt.Errorf("%s is not a YAML mapping", AnnotationProxyConfig)
	}
	// Decoding into a map also rejects duplicate keys and resolves merge
	// keys ("<<"), so "already set" means what Istio would see.
	var fields map[string]any
	if err := doc.Decode(&fields); err != nil {
		return "", false, fmt.Errorf("%s is not a valid mapping: %w", AnnotationProxyConfig, err)
	}
	if _, ok := fields[KeyHold]; ok {
		return config, false, nil
	}
	root := doc.Content[0]
	root.Content = append(root.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: KeyHold},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"},
	)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return "", false, fmt.Errorf("re-encoding %s: %w", AnnotationProxyConfig, err)
	}
	if err := enc.Close(); err != nil {
		return "", false, fmt.Errorf("re-encoding %s: %w", AnnotationProxyConfig, err)
	}
	// Never hand Istio a document we cannot read back ourselves.
	var check map[string]any
	if err := yaml.Unmarshal(buf.Bytes(), &check); err != nil || check[KeyHold] != true || len(check) != len(fields)+1 {
		return "", false, fmt.Errorf("%s could not be rewritten safely (%v)", AnnotationProxyConfig, err)
	}
	return buf.String(), true, nil
}
