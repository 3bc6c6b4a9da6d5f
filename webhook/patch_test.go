package webhook

import "testing"

// TestAnnotationPatchBytes pins the patch's exact bytes: the API server
// applies them to every opted-in pod, and test/bench's floor webhook sends
// the same operation for its comparison.
func TestAnnotationPatchBytes(t *testing.T) {
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
			got, err := annotationPatch(tc.s, key, value)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("patch\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
