package watch

import "fmt"

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
// "Memory"): the bridge's RSS without pods, with room for its
// namespace cache, NATS and HTTP buffers, and the RSS of one more cached
// pod with room for a relist (which holds the old cache and the new one at
// once until it completes).
const (
	CapacityBase   = 48 << 20
	CapacityPerPod = 2 << 10
)

// CapacityError is Run's result when the pods to serve exceed
// Options.MaxPods.
type CapacityError struct {
	// Pods is how many the watcher had been given when it refused (there
	// may be more); Capacity, Options.MaxPods.
	Pods, Capacity int
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("the watcher refuses to serve more than %d pods (its capacity within its memory limit); it had been given %d: "+
		"raise the bridge's memory limit, or opt fewer namespaces in", e.Capacity, e.Pods)
}

// counted adds n pods to the count of every cache, and refuses past
// Options.MaxPods.
func (w *Watcher) counted(n int64) {
	total := w.cached.Add(n)
	w.m.CachedPods.Set(float64(total))
	if n > 0 {
		w.checkCapacity(0)
	}
}

// checkCapacity refuses if the pods cached, plus listing pods of a first
// list not in a cache yet, exceed Options.MaxPods: Run's context is
// cancelled with a *CapacityError as its cause.
func (w *Watcher) checkCapacity(listing int64) {
	if w.o.MaxPods <= 0 {
		return
	}
	if n := w.cached.Load() + listing; n > int64(w.o.MaxPods) {
		w.refuse(&CapacityError{Pods: int(n), Capacity: w.o.MaxPods})
	}
}
