package cluster

import (
	"bytes"
	"errors"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// DecodeManifests reads a YAML (or JSON) stream of Kubernetes objects, as
// `ko resolve` prints them, skipping empty documents.
func DecodeManifests(manifests []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

// EncodeManifests writes objects as one YAML stream, for Apply.
func EncodeManifests(docs []*unstructured.Unstructured) ([]byte, error) {
	var out bytes.Buffer
	for _, d := range docs {
		b, err := yaml.Marshal(d.Object)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	return out.Bytes(), nil
}

// EachContainer calls f on every container and init container under obj
// (a decoded object's map, whatever its kind: a pod, a workload's
// template, a Knative Service's).
func EachContainer(obj any, f func(container map[string]any)) {
	switch o := obj.(type) {
	case map[string]any:
		for k, v := range o {
			if k != "containers" && k != "initContainers" {
				EachContainer(v, f)
				continue
			}
			l, _ := v.([]any)
			for _, c := range l {
				if m, ok := c.(map[string]any); ok {
					f(m)
				}
			}
		}
	case []any:
		for _, v := range o {
			EachContainer(v, f)
		}
	}
}
