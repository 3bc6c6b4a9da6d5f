package proxyconfig

import (
	"errors"
	"fmt"
	"io"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// parseConfig parses config into a node tree: nil for a document of comments
// only, an error unless it is exactly one YAML document holding a mapping.
// Decoding into a yaml.Node neither resolves nor expands anything.
func parseConfig(config string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(strings.NewReader(config))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return nil, nil
	case err != nil:
		return nil, &rejection{what: fmt.Sprintf("%s is not valid YAML (%v)", keys.AnnotationProxyConfig, err), err: err}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, &rejection{what: fmt.Sprintf("%s is not valid YAML (%v)", keys.AnnotationProxyConfig, err), err: err}
	default:
		// Istio reads the first document; rewriting would drop the rest.
		return nil, fmt.Errorf("%s holds more than one YAML document (line %d); istio-aux does not rewrite it: remove the ---",
			keys.AnnotationProxyConfig, extra.Line)
	}
	if len(doc.Content) != 1 {
		return nil, fmt.Errorf("%s is not a YAML document", keys.AnnotationProxyConfig)
	}
	switch root := doc.Content[0]; {
	case root.Kind == yaml.MappingNode:
		return &doc, nil
	case root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null":
		// Istio reads a null document as an empty ProxyConfig.
		return nil, fmt.Errorf("%s is null, not a mapping; istio-aux adds nothing to it: write {} or remove it", keys.AnnotationProxyConfig)
	default:
		return nil, &rejection{what: fmt.Sprintf("%s is %s, not a mapping of ProxyConfig fields", keys.AnnotationProxyConfig, describeKind(root))}
	}
}

// checkTree walks the tree once. It refuses anchors, aliases and merge keys,
// which only expansion could resolve (and expansion is what alias bombs
// exploit), and mapping keys that Istio's YAML-to-JSON conversion rejects.
func checkTree(n *yaml.Node) error {
	if n.Anchor != "" {
		return fmt.Errorf("%s uses the YAML anchor &%s (line %d); istio-aux does not expand anchors, aliases or merge keys: write the values out",
			keys.AnnotationProxyConfig, clip(n.Anchor), n.Line)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return fmt.Errorf("%s uses the YAML alias *%s (line %d); istio-aux does not expand anchors, aliases or merge keys: write the values out",
			keys.AnnotationProxyConfig, clip(n.Value), n.Line)
	case yaml.MappingNode:
		for i := 0; i < len(n.Content); i += 2 {
			switch k := n.Content[i]; {
			case k.Kind == yaml.MappingNode || k.Kind == yaml.SequenceNode:
				return &rejection{what: fmt.Sprintf("%s has a mapping key that is %s (line %d)",
					keys.AnnotationProxyConfig, describeKind(k), k.Line)}
			case k.Kind != yaml.ScalarNode:
			case k.ShortTag() == "!!merge":
				return fmt.Errorf("%s uses the YAML merge key << (line %d); istio-aux does not expand anchors, aliases or merge keys: write the values out",
					keys.AnnotationProxyConfig, k.Line)
			case k.ShortTag() == "!!null":
				return &rejection{what: fmt.Sprintf("%s has a null mapping key (line %d)", keys.AnnotationProxyConfig, k.Line)}
			}
		}
	}
	for _, c := range n.Content {
		if err := checkTree(c); err != nil {
			return err
		}
	}
	return nil
}

// userHold reports whether the user set the hold at the top level of root,
// reading it the way Istio does: either spelling counts, and when both are
// there the camelCase one is the one Istio reads. A value Istio would reject
// is an error, and so is a repeated top-level key: which one a reader keeps
// is not something to guess about.
func userHold(root *yaml.Node) (bool, error) {
	lines := make(map[string]int, len(root.Content)/2)
	var camel, proto *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i]
		if line, dup := lines[k.Value]; dup {
			return false, fmt.Errorf("%s sets %s twice (lines %d and %d); istio-aux does not rewrite it: keep one",
				keys.AnnotationProxyConfig, clip(k.Value), line, k.Line)
		}
		lines[k.Value] = k.Line
		switch k.Value {
		case KeyHold:
			camel = root.Content[i+1]
		case KeyHoldProto:
			proto = root.Content[i+1]
		}
	}
	key, v := KeyHold, camel
	if v == nil {
		key, v = KeyHoldProto, proto
	}
	if v == nil {
		return false, nil
	}
	if problem, fix := holdProblem(v); problem != "" {
		return false, &rejection{what: fmt.Sprintf("%s: %s %s", keys.AnnotationProxyConfig, key, problem), fix: fix}
	}
	return true, nil
}

func describeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return fmt.Sprintf("the scalar %q", clip(n.Value))
}

// clip shortens user text quoted in a warning.
func clip(s string) string { return clipTo(s, 40) }

// clipTo shortens s to at most max bytes and an ellipsis.
func clipTo(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}
