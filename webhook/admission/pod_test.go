package admission

import (
	"reflect"
	"slices"
	"testing"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// Struct tags cannot name constants: the labels and annotations Pod decodes
// are the keys istio-aux's decision and Istio's injector read.
func TestPodTagsAreTheKeys(t *testing.T) {
	tags := func(v any) []string {
		var out []string
		ty := reflect.TypeOf(v)
		for i := range ty.NumField() {
			out = append(out, ty.Field(i).Tag.Get("json"))
		}
		return out
	}
	if got, want := tags(podLabels{}), []string{keys.LabelEnabled, keys.KeyInject, keys.LabelWatched}; !slices.Equal(got, want) {
		t.Errorf("label tags %q, want %q", got, want)
	}
	want := []string{keys.AnnotationEnabled, keys.KeyInject, keys.AnnotationNativeSidecar, keys.AnnotationProxyConfig}
	if got := tags(podAnnotations{}); !slices.Equal(got, want) {
		t.Errorf("annotation tags %q, want %q", got, want)
	}
}
