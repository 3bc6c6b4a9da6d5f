package watch

import (
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/functions/podevent"
)

// CachedPod is what the pod informer stores: exactly the fields of
// podevent.Slim, packed. The cache holds every watched pod for as long as it
// runs, so its size per pod is the bridge's memory per pod (issue target:
// 2 KiB of RSS). A slim *corev1.Pod still costs ~4.6 KiB of heap (the Pod
// struct alone is 1,168 bytes and every Container 408, though we keep only
// names); an embedded ObjectMeta and two small maps cost another ~900 bytes.
// So CachedPod keeps its own few fields, labels and annotations as key/value
// lists, times as Unix seconds (the API's precision), and every string that
// pods share (namespace, label keys and values, container names, reasons,
// phase) as a unique.Handle: one copy per distinct value in the process,
// released when no cached pod uses it any more. BenchmarkCacheBytesPerPod
// measures it. Pod() unpacks it into the same slim pod, so the filter and
// the event see precisely what Slim would have produced.
type CachedPod struct {
	name, uid, resourceVersion string // unique per pod: not interned
	namespace                  handle
	deletion                   *metav1.Time
	labels, annotations        []handle // key, value, key, value, ...
	restartPolicy, phase       handle
	initContainers, containers []cachedContainer
	initStatuses, statuses     []cachedStatus
}

type handle = unique.Handle[string]

func intern(s string) handle { return unique.Make(s) }

type cachedContainer struct {
	name          handle
	restartPolicy *corev1.ContainerRestartPolicy // shared with no one: Slim copied it
}

// State kinds of a cachedStatus.
const (
	stateNone uint8 = iota
	stateWaiting
	stateRunning
	stateTerminated
)

type cachedStatus struct {
	name         handle
	reason       handle // waiting or terminated reason
	time         int64  // running startedAt or terminated finishedAt, Unix seconds
	exitCode     int32
	restartCount int32
	kind         uint8
	ready        bool
	hasTime      bool // time is set (a zero metav1.Time is not the epoch)
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
		name:            slim.Name,
		uid:             string(slim.UID),
		resourceVersion: slim.ResourceVersion,
		namespace:       intern(slim.Namespace),
		deletion:        slim.DeletionTimestamp, // never written; Pod() hands out copies
		labels:          compactMap(slim.Labels),
		annotations:     compactMap(slim.Annotations),
		restartPolicy:   intern(string(slim.Spec.RestartPolicy)),
		phase:           intern(string(slim.Status.Phase)),
		initContainers:  compactContainers(slim.Spec.InitContainers),
		containers:      compactContainers(slim.Spec.Containers),
		initStatuses:    compactStatuses(slim.Status.InitContainerStatuses),
		statuses:        compactStatuses(slim.Status.ContainerStatuses),
	}
}

// compactMap flattens m into key, value pairs (in map order: nothing
// compares them, Pod() rebuilds the map); nil stays nil and an empty map
// stays empty (Slim keeps that difference for labels).
func compactMap(m map[string]string) []handle {
	if m == nil {
		return nil
	}
	out := make([]handle, 0, 2*len(m))
	for k, v := range m {
		out = append(out, intern(k), intern(v))
	}
	return out
}

func expandMap(kv []handle) map[string]string {
	if kv == nil {
		return nil
	}
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].Value()] = kv[i+1].Value()
	}
	return m
}

func compactContainers(in []corev1.Container) []cachedContainer {
	if len(in) == 0 {
		return nil
	}
	out := make([]cachedContainer, len(in))
	for i, c := range in {
		out[i] = cachedContainer{name: intern(c.Name), restartPolicy: c.RestartPolicy}
	}
	return out
}

func compactStatuses(in []corev1.ContainerStatus) []cachedStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]cachedStatus, len(in))
	for i, s := range in {
		c := cachedStatus{name: intern(s.Name), ready: s.Ready, restartCount: s.RestartCount}
		var reason string
		var at metav1.Time
		switch st := s.State; {
		case st.Terminated != nil:
			c.kind, c.exitCode, reason, at = stateTerminated, st.Terminated.ExitCode, st.Terminated.Reason, st.Terminated.FinishedAt
		case st.Running != nil:
			c.kind, at = stateRunning, st.Running.StartedAt
		case st.Waiting != nil:
			c.kind, reason = stateWaiting, st.Waiting.Reason
		}
		c.reason = intern(reason)
		if !at.IsZero() {
			c.time, c.hasTime = at.Unix(), true
		}
		out[i] = c
	}
	return out
}

// Name is the pod's name.
func (c *CachedPod) Name() string { return c.name }

// Namespace is the pod's namespace.
func (c *CachedPod) Namespace() string { return c.namespace.Value() }

// ResourceVersion is the resourceVersion the cached state was read at.
func (c *CachedPod) ResourceVersion() string { return c.resourceVersion }

// Pod unpacks c into a new slim pod, equal to what podevent.Slim returned
// for the pod it was made from. The result shares no maps or slices with c,
// so callers may do anything with it without touching the cache.
func (c *CachedPod) Pod() *corev1.Pod {
	meta := metav1.ObjectMeta{
		Name:            c.name,
		Namespace:       c.namespace.Value(),
		UID:             types.UID(c.uid),
		ResourceVersion: c.resourceVersion,
		Labels:          expandMap(c.labels),
		Annotations:     expandMap(c.annotations),
	}
	if c.deletion != nil {
		d := *c.deletion
		meta.DeletionTimestamp = &d
	}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			RestartPolicy:  corev1.RestartPolicy(c.restartPolicy.Value()),
			InitContainers: expandContainers(c.initContainers),
			Containers:     expandContainers(c.containers),
		},
		Status: corev1.PodStatus{
			Phase:                 corev1.PodPhase(c.phase.Value()),
			InitContainerStatuses: expandStatuses(c.initStatuses),
			ContainerStatuses:     expandStatuses(c.statuses),
		},
	}
}

func expandContainers(in []cachedContainer) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i].Name = c.name.Value()
		if c.restartPolicy != nil {
			p := *c.restartPolicy
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
		out[i] = corev1.ContainerStatus{Name: c.name.Value(), Ready: c.ready, RestartCount: c.restartCount}
		var at metav1.Time
		if c.hasTime {
			at = metav1.Unix(c.time, 0)
		}
		switch c.kind {
		case stateTerminated:
			out[i].State.Terminated = &corev1.ContainerStateTerminated{ExitCode: c.exitCode, Reason: c.reason.Value(), FinishedAt: at}
		case stateRunning:
			out[i].State.Running = &corev1.ContainerStateRunning{StartedAt: at}
		case stateWaiting:
			out[i].State.Waiting = &corev1.ContainerStateWaiting{Reason: c.reason.Value()}
		}
	}
	return out
}

// GetObjectMeta makes CachedPod a metav1.ObjectMetaAccessor, which is all
// the informer's store needs of it (meta.Accessor: the key and namespace
// index functions). It returns a new ObjectMeta with the identifying fields
// only; labels and annotations are read through Pod().
func (c *CachedPod) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: c.name, Namespace: c.namespace.Value(), UID: types.UID(c.uid),
		ResourceVersion: c.resourceVersion, DeletionTimestamp: c.deletion}
}

// GetObjectKind and DeepCopyObject make CachedPod a runtime.Object, which
// parts of client-go's informer machinery expect of stored objects.
func (c *CachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject returns an independent copy. Handles are immutable values
// and restart policies are never written, so copying the slices suffices.
func (c *CachedPod) DeepCopyObject() runtime.Object {
	out := *c
	out.labels = cloneNil(c.labels)
	out.annotations = cloneNil(c.annotations)
	out.initContainers = cloneNil(c.initContainers)
	out.containers = cloneNil(c.containers)
	out.initStatuses = cloneNil(c.initStatuses)
	out.statuses = cloneNil(c.statuses)
	if c.deletion != nil {
		d := *c.deletion
		out.deletion = &d
	}
	return &out
}

func cloneNil[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}
