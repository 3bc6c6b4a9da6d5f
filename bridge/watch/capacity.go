package watch

import (
	"fmt"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Capacity is the most pods a watcher holds within memoryLimit bytes of
// memory (a container's limit): what the process needs without pods
// (CapacityBase) subtracted, the rest at CapacityPerPod a pod. 0 (no limit)
// when memoryLimit is 0; at least 1 otherwise.
func Capacity(memoryLimit int64) int {
	if memoryLimit <= 0 {
		return 0
	}
	return int(max(1, (memoryLimit-CapacityBase)/CapacityPerPod))
}

// The memory model behind Capacity, from make bench (docs/bench.md,
// "Memory"): the bridge's RSS without pods, with room for its namespace
// cache, NATS and HTTP buffers, and the RSS of one more cached pod with
// room for a relist (which holds the old cache and the new one at once
// until it completes). The RSS of a cached pod is about twice the heap its
// entry holds (make bench: 0.64 KiB of heap, 1.26 KiB of RSS per pod), so
// a pod's entry may hold CapacityHeapPerPod of heap for CapacityPerPod of
// memory, relist included; an entry that holds more counts as several
// pods (Packed.Units).
const (
	CapacityBase       = 48 << 20
	CapacityPerPod     = 2 << 10
	CapacityHeapPerPod = CapacityPerPod / 4
)

// CapacityError is Run's result when the pods to serve exceed
// Options.MaxPods.
type CapacityError struct {
	// Pods is how many the watcher had been given when it refused (there
	// may be more), each counted by its size (Packed.Units); Capacity,
	// Options.MaxPods.
	Pods, Capacity int
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("the watcher refuses to serve more than %d pods (its capacity within its memory limit); it had been given %d "+
		"(a pod with many containers or long names counts as several): raise the bridge's memory limit, or opt fewer namespaces in",
		e.Capacity, e.Pods)
}

// counted adds pods to the count of every cache and units to their charge
// against the capacity, and refuses past Options.MaxPods.
func (w *Watcher) counted(pods, units int64) {
	w.m.CachedPods.Set(float64(w.cached.Add(pods)))
	w.charged.Add(units)
	if units > 0 {
		w.checkCapacity(0)
	}
}

// checkCapacity refuses if the units the caches are charged, plus listing
// units of a first list not in a cache yet, exceed Options.MaxPods: Run's
// context is cancelled with a *CapacityError as its cause.
func (w *Watcher) checkCapacity(listing int64) {
	if w.o.MaxPods <= 0 {
		return
	}
	if n := w.charged.Load() + listing; n > int64(w.o.MaxPods) {
		w.refused.Store(true)
		w.refuse(&CapacityError{Pods: int(n), Capacity: w.o.MaxPods})
	}
}

// unitsOf is what an entry holding heapBytes counts against the capacity:
// a pod for each CapacityHeapPerPod begun.
func unitsOf(heapBytes int) int {
	return max(1, (heapBytes+CapacityHeapPerPod-1)/CapacityHeapPerPod)
}

// storeEntryBytes bounds what a pod's slot in its store's map costs: a
// key (a string header sharing the pod's name) and a pointer, in a Swiss
// table that may be half empty after it grows.
const storeEntryBytes = 64

// heapBytes bounds the heap c holds in a store: each of its allocations,
// rounded up to the allocator's size class, and its store entry. Strings
// it shares (handles) are not counted: one copy serves every pod.
func (c *Packed) heapBytes() int {
	n := allocated(int(unsafe.Sizeof(*c))) + allocated(len(c.name)) + allocated(len(c.uid)) +
		allocated(len(c.resourceVersion)) + allocated(len(c.names)) +
		allocated(len(c.containers)*int(unsafe.Sizeof(packedContainer{})))
	if c.deletion != nil {
		n += allocated(int(unsafe.Sizeof(metav1.Time{})))
	}
	return n + storeEntryBytes
}

// allocated is the memory an allocation of n bytes takes: the Go
// allocator's size classes up to 32 KiB (Go 1.26: internal/runtime/gc/sizeclasses.go), whole
// 8 KiB pages above.
func allocated(n int) int {
	if n == 0 {
		return 0
	}
	for _, size := range sizeClasses {
		if n <= size {
			return size
		}
	}
	return (n + 8<<10 - 1) &^ (8<<10 - 1)
}

var sizeClasses = [...]int{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
	288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792,
	2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240,
	10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}
