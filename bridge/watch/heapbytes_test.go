package watch

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The capacity model charges a pod by Packed.heapBytes, a bound computed
// from the entry's own allocations, not by a heap measurement (a live-heap
// difference moves with whatever else the process allocates or frees
// meanwhile). The bound holds if the entry has no memory heapBytes does not
// count: no field it does not know (TestHeapBytesCountsEveryField), and no
// string sharing the pod's labels or annotations (metadataHeld), which is
// how a 200 KiB annotation once cost 213,497 B per pod.

// TestHeapBytesCountsEveryField: every field of Packed and packedContainer
// that points to memory is one heapBytes counts, or a handle (one copy per
// distinct value in the process, shared by the pods). A new one fails here
// until heapBytes counts it and it is listed below.
func TestHeapBytesCountsEveryField(t *testing.T) {
	// The fields heapBytes counts an allocation of, as the type it counts:
	// the strings' and the containers' whole length, a *metav1.Time's
	// size (its time.Location is the process's, shared).
	counted := map[string]reflect.Type{"name": reflect.TypeFor[string](), "uid": reflect.TypeFor[string](),
		"resourceVersion": reflect.TypeFor[string](), "names": reflect.TypeFor[string](),
		"containers": reflect.TypeFor[[]packedContainer](), "deletion": reflect.TypeFor[*metav1.Time]()}
	for f := range reflect.TypeFor[Packed]().Fields() {
		if want, ok := counted[f.Name]; ok {
			if f.Type != want {
				t.Errorf("Packed.%s is a %s: heapBytes counts it as a %s", f.Name, f.Type, want)
			}
		} else if !ownsNothing(f.Type) {
			t.Errorf("Packed.%s (%s) points to memory heapBytes does not count: count it there, then list it here", f.Name, f.Type)
		}
	}
	// heapBytes counts the containers as len(containers) of their size.
	for f := range reflect.TypeFor[packedContainer]().Fields() {
		if !ownsNothing(f.Type) {
			t.Errorf("packedContainer.%s (%s) points to memory heapBytes does not count", f.Name, f.Type)
		}
	}
}

// ownsNothing reports whether a value of typ holds no pointer but handles:
// it costs the heap nothing beyond its own size.
func ownsNothing(typ reflect.Type) bool {
	if typ == reflect.TypeFor[handle]() {
		return true
	}
	switch typ.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return ownsNothing(typ.Elem())
	case reflect.Struct:
		for f := range typ.Fields() {
			if !ownsNothing(f.Type) {
				return false
			}
		}
		return true
	}
	return false
}

// metadataHeld names a string of c that lies in a label's or an
// annotation's key or value of p, the pod it was packed from: memory
// heapBytes counts at the string's length, the heap at the whole
// label's or annotation's. "" if none does.
func metadataHeld(c *Packed, p *corev1.Pod) string {
	own := []struct{ field, s string }{{"name", c.name}, {"uid", c.uid}, {"resourceVersion", c.resourceVersion}, {"names", c.names}}
	for _, m := range []map[string]string{p.Labels, p.Annotations} {
		for k, v := range m {
			for _, meta := range []string{k, v} {
				for _, o := range own {
					if overlap(o.s, meta) {
						return fmt.Sprintf("%s (%.20q) lies in the label or annotation %.40q", o.field, o.s, k)
					}
				}
			}
		}
	}
	return ""
}

// overlap reports whether a and b share bytes of memory.
func overlap(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.StringData(a))), uintptr(unsafe.Pointer(unsafe.StringData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// TestMetadataHeldSeesASharedString: the check above finds a packed string
// that is a piece of an annotation, and passes one that is a copy.
func TestMetadataHeldSeesASharedString(t *testing.T) {
	annotation := "app-a,app-b," + fmt.Sprint(1<<40) // built at run time: its own allocation
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"k": annotation}}}
	if got := metadataHeld(&Packed{names: string([]byte(annotation[:5]))}, p); got != "" {
		t.Errorf("a copy: %s", got)
	}
	if got := metadataHeld(&Packed{names: annotation[6:11]}, p); got == "" {
		t.Error("a piece of the annotation held as names went unseen")
	}
}
