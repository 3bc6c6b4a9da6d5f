package proxyconfig

import (
	"fmt"

	yaml "go.yaml.in/yaml/v3"
)

// How Istio reads the hold value. istiod's injector converts the annotation
// with sigs.k8s.io/yaml.YAMLToJSON, which reads YAML 1.1 (go.yaml.in/yaml/v2),
// and unmarshals the JSON with protobuf's jsonpb into a BoolValue, which
// takes JSON true, false or null (null leaves the field unset). Anything else
// fails the injection: a quoted "true" is "cannot unmarshal string into Go
// value of type bool".

// holdProblem says why Istio would reject v as the hold value, as the rest of
// a sentence about the key ("is the string \"true\""), and what to write
// instead; "" when Istio accepts it.
func holdProblem(v *yaml.Node) (problem, fix string) {
	const trueOrFalse = "write true or false"
	switch v.Kind {
	case yaml.MappingNode, yaml.SequenceNode:
		return "is " + describeKind(v), trueOrFalse
	case yaml.ScalarNode:
	default:
		return "is not a plain value", trueOrFalse
	}
	if v.Style&yaml.TaggedStyle != 0 {
		// YAML 1.1 resolves a !!bool or !!null tag by the same tables as
		// plain text; any other tag makes a string or a number.
		if (v.Tag == "!!bool" && yaml11Bool(v.Value) != "") || (v.Tag == "!!null" && yamlNull(v.Value)) {
			return "", ""
		}
		return fmt.Sprintf("is %q tagged %s", clip(v.Value), clip(v.Tag)), trueOrFalse
	}
	b := yaml11Bool(v.Value)
	if !isPlain(v) {
		if b != "" {
			return fmt.Sprintf("is the string %q", clip(v.Value)), "write " + b + " without quotes"
		}
		return fmt.Sprintf("is the string %q", clip(v.Value)), trueOrFalse
	}
	if b != "" || yamlNull(v.Value) {
		return "", ""
	}
	return fmt.Sprintf("is %s, not true or false", clip(v.Value)), trueOrFalse
}

// yaml11Bool returns "true" or "false" for the plain scalars YAML 1.1 reads
// as booleans (go.yaml.in/yaml/v2's resolve table), "" for anything else.
// YAML 1.2 (yaml.v3) reads only the true/false ones as booleans, so yes, on
// and y are booleans to Istio but strings to yaml.v3.
func yaml11Bool(s string) string {
	switch s {
	case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
		return "true"
	case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
		return "false"
	}
	return ""
}

// yamlNull reports the plain scalars both YAML 1.1 and 1.2 read as null.
func yamlNull(s string) bool {
	switch s {
	case "", "~", "null", "Null", "NULL":
		return true
	}
	return false
}
