package admission

import "testing"

// TestPatchBytes pins the patch's exact bytes: the API server applies them
// to every opted-in pod, and test/bench's floor webhook sends the same
// operation for its comparison.
func TestPatchBytes(t *testing.T) {
	const key, value = "proxy.istio.io/config", "holdApplicationUntilProxyStarts: true"
	tests := map[string]struct {
		s    shape
		want string
	}{
		"annotations exist": {shape{metadata: true, annotations: true},
			`[{"op":"add","path":"/metadata/annotations/proxy.istio.io~1config","value":"holdApplicationUntilProxyStarts: true"}]`},
		"metadata only": {shape{metadata: true},
			`[{"op":"add","path":"/metadata/annotations","value":{"proxy.istio.io/config":"holdApplicationUntilProxyStarts: true"}}]`},
		"no metadata": {shape{},
			`[{"op":"add","path":"/metadata","value":{"annotations":{"proxy.istio.io/config":"holdApplicationUntilProxyStarts: true"}}}]`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := patchFor(tc.s, Mutation{Key: key, Value: value})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("patch\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestLabelPatchBytes pins the label's operations, alone and beside the
// annotation, for each shape of metadata the object may have.
func TestLabelPatchBytes(t *testing.T) {
	const ann = `{"op":"add","path":"/metadata/annotations/proxy.istio.io~1config","value":"holdApplicationUntilProxyStarts: true"}`
	hold := Mutation{Key: "proxy.istio.io/config", Value: "holdApplicationUntilProxyStarts: true", Label: true}
	tests := map[string]struct {
		s    shape
		m    Mutation
		want string
	}{
		"label alone, labels exist": {shape{metadata: true, labels: true}, Mutation{Label: true},
			`[{"op":"add","path":"/metadata/labels/istio-aux.dev~1watched","value":"true"}]`},
		"label alone, no labels": {shape{metadata: true}, Mutation{Label: true},
			`[{"op":"add","path":"/metadata/labels","value":{"istio-aux.dev/watched":"true"}}]`},
		"both, both exist": {shape{metadata: true, annotations: true, labels: true}, hold,
			`[` + ann + `,{"op":"add","path":"/metadata/labels/istio-aux.dev~1watched","value":"true"}]`},
		"both, no metadata": {shape{}, hold,
			`[{"op":"add","path":"/metadata","value":{"annotations":{"proxy.istio.io/config":"holdApplicationUntilProxyStarts: true"},"labels":{"istio-aux.dev/watched":"true"}}}]`},
		"nothing": {shape{metadata: true}, Mutation{}, ``},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := patchFor(tc.s, tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("patch\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
