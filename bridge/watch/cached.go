package watch

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/functions/podevent"
)

// CachedPod is what the pod informer stores: exactly the fields of
// podevent.Slim, packed. A slim *corev1.Pod still costs ~4.6 KiB of heap
// (the Pod struct alone is 1,168 bytes and every Container 408, though we
// keep only names); this form costs about a third of that (see
// BenchmarkCacheBytesPerPod). Pod() unpacks it into the same slim pod, so
// the filter and the event see precisely what Slim would have produced.
type CachedPod struct {
	// ObjectMeta holds only name, namespace, uid, resourceVersion, labels,
	// the kept annotations and deletionTimestamp. Embedded so that the
	// store's key and namespace index functions work unchanged.
	metav1.ObjectMeta
	RestartPolicy  corev1.RestartPolicy
	Phase          corev1.PodPhase
	InitContainers []cachedContainer
	Containers     []cachedContainer
	InitStatuses   []cachedStatus
	Statuses       []cachedStatus
}

type cachedContainer struct {
	Name          string
	RestartPolicy *corev1.ContainerRestartPolicy
}

// State kinds of a cachedStatus.
const (
	stateNone uint8 = iota
	stateWaiting
	stateRunning
	stateTerminated
)

type cachedStatus struct {
	Name         string
	Reason       string      // waiting or terminated reason
	Time         metav1.Time // running startedAt or terminated finishedAt
	ExitCode     int32
	RestartCount int32
	Kind         uint8
	Ready        bool
}

// CompactPod is the pod informer's cache.TransformFunc: Slim, then packed.
// Tombstones are packed too.
func CompactPod(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return compact(podevent.Slim(o)), nil
	case cache.DeletedFinalStateUnknown:
		if p, ok := o.Obj.(*corev1.Pod); ok {
			o.Obj = compact(podevent.Slim(p))
		}
		return o, nil
	}
	return obj, nil
}

func compact(slim *corev1.Pod) *CachedPod {
	return &CachedPod{
		ObjectMeta:     slim.ObjectMeta, // Slim built it fresh: nothing shared with the API object
		RestartPolicy:  slim.Spec.RestartPolicy,
		Phase:          slim.Status.Phase,
		InitContainers: compactContainers(slim.Spec.InitContainers),
		Containers:     compactContainers(slim.Spec.Containers),
		InitStatuses:   compactStatuses(slim.Status.InitContainerStatuses),
		Statuses:       compactStatuses(slim.Status.ContainerStatuses),
	}
}

func compactContainers(in []corev1.Container) []cachedContainer {
	if len(in) == 0 {
		return nil
	}
	out := make([]cachedContainer, len(in))
	for i, c := range in {
		out[i] = cachedContainer{Name: c.Name, RestartPolicy: c.RestartPolicy}
	}
	return out
}

func compactStatuses(in []corev1.ContainerStatus) []cachedStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]cachedStatus, len(in))
	for i, s := range in {
		c := cachedStatus{Name: s.Name, Ready: s.Ready, RestartCount: s.RestartCount}
		switch st := s.State; {
		case st.Terminated != nil:
			c.Kind, c.ExitCode, c.Reason, c.Time = stateTerminated, st.Terminated.ExitCode, st.Terminated.Reason, st.Terminated.FinishedAt
		case st.Running != nil:
			c.Kind, c.Time = stateRunning, st.Running.StartedAt
		case st.Waiting != nil:
			c.Kind, c.Reason = stateWaiting, st.Waiting.Reason
		}
		out[i] = c
	}
	return out
}

// Pod unpacks c into a new slim pod, equal to what podevent.Slim returned
// for the pod it was made from. The result shares no maps or slices with c,
// so callers may do anything with it without touching the cache.
func (c *CachedPod) Pod() *corev1.Pod {
	meta := *c.ObjectMeta.DeepCopy()
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			RestartPolicy:  c.RestartPolicy,
			InitContainers: expandContainers(c.InitContainers),
			Containers:     expandContainers(c.Containers),
		},
		Status: corev1.PodStatus{
			Phase:                 c.Phase,
			InitContainerStatuses: expandStatuses(c.InitStatuses),
			ContainerStatuses:     expandStatuses(c.Statuses),
		},
	}
}

func expandContainers(in []cachedContainer) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i].Name = c.Name
		if c.RestartPolicy != nil {
			p := *c.RestartPolicy
			out[i].RestartPolicy = &p
		}
	}
	return out
}

func expandStatuses(in []cachedStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i, c := range in {
		out[i] = corev1.ContainerStatus{Name: c.Name, Ready: c.Ready, RestartCount: c.RestartCount}
		switch c.Kind {
		case stateTerminated:
			out[i].State.Terminated = &corev1.ContainerStateTerminated{ExitCode: c.ExitCode, Reason: c.Reason, FinishedAt: c.Time}
		case stateRunning:
			out[i].State.Running = &corev1.ContainerStateRunning{StartedAt: c.Time}
		case stateWaiting:
			out[i].State.Waiting = &corev1.ContainerStateWaiting{Reason: c.Reason}
		}
	}
	return out
}

// GetObjectKind and DeepCopyObject make CachedPod a runtime.Object, which
// parts of client-go's informer machinery expect of stored objects.
func (c *CachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject returns an independent copy.
func (c *CachedPod) DeepCopyObject() runtime.Object {
	out := *c
	out.ObjectMeta = *c.ObjectMeta.DeepCopy()
	out.InitContainers = append([]cachedContainer(nil), c.InitContainers...)
	out.Containers = append([]cachedContainer(nil), c.Containers...)
	out.InitStatuses = append([]cachedStatus(nil), c.InitStatuses...)
	out.Statuses = append([]cachedStatus(nil), c.Statuses...)
	return &out
}
