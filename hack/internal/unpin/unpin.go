// Package unpin takes every pinned user, group and fsGroup out of a
// release's pod templates: the release's OpenShift variant (cmd
// hack/release/unpin), and the chart's openshift value checked against it
// (hack/chart).
package unpin

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// pinned are the securityContext fields that name IDs.
var pinned = []string{"runAsUser", "runAsGroup", "fsGroup"}

// Unpin copies the YAML stream from in to out, documents in order, with
// the pinned IDs removed from every pod template (and every pod).
func Unpin(in io.Reader, out io.Writer) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(in))
	first := true
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return err
		}
		if obj == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if spec := podSpec(u); spec != nil {
			strip(spec, "securityContext")
			for _, kind := range []string{"initContainers", "containers"} {
				cs, _ := spec[kind].([]any)
				for _, c := range cs {
					if m, ok := c.(map[string]any); ok {
						strip(m, "securityContext")
					}
				}
			}
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			return err
		}
		if !first {
			if _, err := io.WriteString(out, "---\n"); err != nil {
				return err
			}
		}
		first = false
		if _, err := out.Write(b); err != nil {
			return err
		}
	}
}

// podSpec is the pod spec of a pod, or of a workload's pod template.
func podSpec(u *unstructured.Unstructured) map[string]any {
	path := []string{"spec", "template", "spec"}
	switch u.GetKind() {
	case "Pod":
		path = []string{"spec"}
	case "CronJob":
		path = []string{"spec", "jobTemplate", "spec", "template", "spec"}
	case "Service": // Knative's: its template is a pod spec too
		if u.GetAPIVersion() != "serving.knative.dev/v1" {
			return nil
		}
	}
	m := u.Object
	for _, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil
		}
		m = next
	}
	return m
}

// strip removes the pinned IDs from m[key], a securityContext.
func strip(m map[string]any, key string) {
	sc, ok := m[key].(map[string]any)
	if !ok {
		return
	}
	for _, f := range pinned {
		delete(sc, f)
	}
}
