package watch

import (
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/pkg/slim"
)

// Packed is a slim pod as the bridge's informer cache stores it. The cache
// holds every watched pod for as long as the bridge runs, so its size per
// pod is the bridge's memory per pod (BenchmarkCacheBytesPerPod in
// bridge/watch measures it). A *slim.Pod costs several times more: every field
// of its own, maps for labels and annotations, a string per container name.
// Packed keeps labels and annotations as key/value lists, times as Unix
// seconds (the API's precision), and every string pods share (namespace,
// label values, container names, reasons, phase) as a unique.Handle: one
// copy per distinct value in the process, released when no packed pod uses
// it any more. Unpack returns exactly the slim.Pod it was packed from.
type Packed struct {
	name, uid, resourceVersion string // unique per pod: not interned
	namespace                  handle
	deletion                   *metav1.Time
	labels, annotations        []handle // key, value, key, value, ...
	restartPolicy, phase       handle
	initContainers, containers []packedContainer
	initStatuses, statuses     []packedStatus
}

type handle = unique.Handle[string]

func intern(s string) handle { return unique.Make(s) }

type packedContainer struct {
	name          handle
	restartPolicy *corev1.ContainerRestartPolicy // a copy: shared with no one
	rules         slim.Rules                     // a copy; nil for almost every pod
}

// slim.State kinds of a packedStatus.
const (
	stateNone uint8 = iota
	stateWaiting
	stateRunning
	stateTerminated
)

type packedStatus struct {
	name         handle
	reason       handle // waiting or terminated reason
	time         int64  // running startedAt or terminated finishedAt, Unix seconds
	exitCode     int32
	restartCount int32
	kind         uint8
	ready        bool
	hasTime      bool // time is set (a zero metav1.Time is not the epoch)
}

// PackTransform is the pod informer's cache.TransformFunc: Of, then Pack.
// Tombstones are packed too; other objects pass through.
func PackTransform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return Pack(slim.Of(o)), nil
	case cache.DeletedFinalStateUnknown:
		if p, ok := o.Obj.(*corev1.Pod); ok {
			o.Obj = Pack(slim.Of(p))
		}
		return o, nil
	}
	return obj, nil
}

// Pack packs p. The result shares nothing mutable with p.
func Pack(p *slim.Pod) *Packed {
	return &Packed{
		name:            p.Name,
		uid:             string(p.UID),
		resourceVersion: p.ResourceVersion,
		namespace:       intern(p.Namespace),
		deletion:        copyTime(p.DeletionTimestamp),
		labels:          packMap(p.Labels),
		annotations:     packMap(p.Annotations),
		restartPolicy:   intern(string(p.Spec.RestartPolicy)),
		phase:           intern(string(p.Status.Phase)),
		initContainers:  packContainers(p.Spec.InitContainers),
		containers:      packContainers(p.Spec.Containers),
		initStatuses:    packStatuses(p.Status.InitContainerStatuses),
		statuses:        packStatuses(p.Status.ContainerStatuses),
	}
}

// packMap flattens m into key, value pairs (in map order: nothing compares
// them, Unpack rebuilds the map); nil stays nil and an empty map stays empty.
func packMap(m slim.Kept) []handle {
	if m == nil {
		return nil
	}
	out := make([]handle, 0, 2*len(m))
	for k, v := range m {
		out = append(out, intern(k), intern(v))
	}
	return out
}

func unpackMap(kv []handle) slim.Kept {
	if kv == nil {
		return nil
	}
	m := make(slim.Kept, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].Value()] = kv[i+1].Value()
	}
	return m
}

func packContainers(in slim.Containers) []packedContainer {
	if len(in) == 0 {
		return nil
	}
	out := make([]packedContainer, len(in))
	for i, c := range in {
		out[i] = packedContainer{name: intern(c.Name), restartPolicy: copyPolicy(c.RestartPolicy), rules: c.RestartPolicyRules.Clone()}
	}
	return out
}

func unpackContainers(in []packedContainer) slim.Containers {
	if len(in) == 0 {
		return nil
	}
	out := make(slim.Containers, len(in))
	for i, c := range in {
		out[i] = slim.Container{Name: c.name.Value(), RestartPolicy: copyPolicy(c.restartPolicy), RestartPolicyRules: c.rules.Clone()}
	}
	return out
}

func copyPolicy(p *corev1.ContainerRestartPolicy) *corev1.ContainerRestartPolicy {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

func copyTime(t *metav1.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

func packStatuses(in slim.Statuses) []packedStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]packedStatus, len(in))
	for i, s := range in {
		c := packedStatus{name: intern(s.Name), ready: s.Ready, restartCount: s.RestartCount}
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

func unpackStatuses(in []packedStatus) slim.Statuses {
	if len(in) == 0 {
		return nil
	}
	out := make(slim.Statuses, len(in))
	for i, c := range in {
		out[i] = slim.ContainerStatus{Name: c.name.Value(), Ready: c.ready, RestartCount: c.restartCount}
		var at metav1.Time
		if c.hasTime {
			at = metav1.Unix(c.time, 0)
		}
		switch c.kind {
		case stateTerminated:
			out[i].State.Terminated = &slim.Terminated{ExitCode: c.exitCode, Reason: c.reason.Value(), FinishedAt: at}
		case stateRunning:
			out[i].State.Running = &slim.Running{StartedAt: at}
		case stateWaiting:
			out[i].State.Waiting = &slim.Waiting{Reason: c.reason.Value()}
		}
	}
	return out
}

// Unpack returns a new slim.Pod equal to the one c was packed from. It shares no
// maps or slices with c, so callers may do anything with it without
// touching the cache.
func (c *Packed) Unpack() *slim.Pod {
	return &slim.Pod{
		APIVersion: "v1",
		Kind:       "Pod",
		Meta: slim.Meta{
			Name:              c.name,
			Namespace:         c.namespace.Value(),
			UID:               types.UID(c.uid),
			ResourceVersion:   c.resourceVersion,
			DeletionTimestamp: copyTime(c.deletion),
			Labels:            unpackMap(c.labels),
			Annotations:       unpackMap(c.annotations),
		},
		Spec: slim.Spec{
			RestartPolicy:  corev1.RestartPolicy(c.restartPolicy.Value()),
			InitContainers: unpackContainers(c.initContainers),
			Containers:     unpackContainers(c.containers),
		},
		Status: slim.Status{
			Phase:                 corev1.PodPhase(c.phase.Value()),
			InitContainerStatuses: unpackStatuses(c.initStatuses),
			ContainerStatuses:     unpackStatuses(c.statuses),
		},
	}
}

// podLabels are the labels c keeps (slim.KeptLabels), for Scope.Admits.
func (c *Packed) podLabels() map[string]string { return unpackMap(c.labels) }

// Name is the pod's name.
func (c *Packed) Name() string { return c.name }

// Namespace is the pod's namespace.
func (c *Packed) Namespace() string { return c.namespace.Value() }

// ResourceVersion is the resourceVersion the packed state was read at.
func (c *Packed) ResourceVersion() string { return c.resourceVersion }

// GetObjectMeta makes Packed a metav1.ObjectMetaAccessor, which is all the
// informer's store needs of it (meta.Accessor: the key and namespace index
// functions). It returns a new slim.ObjectMeta with the identifying fields only.
func (c *Packed) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: c.name, Namespace: c.namespace.Value(), UID: types.UID(c.uid),
		ResourceVersion: c.resourceVersion, DeletionTimestamp: copyTime(c.deletion)}
}

// GetObjectKind makes Packed a runtime.Object, which parts of client-go's
// informer machinery expect of stored objects.
func (c *Packed) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject returns an independent copy. Handles are immutable values
// and restart policies and rules are never written, so copying the slices
// suffices.
func (c *Packed) DeepCopyObject() runtime.Object {
	out := *c
	out.labels = cloneNil(c.labels)
	out.annotations = cloneNil(c.annotations)
	out.initContainers = cloneNil(c.initContainers)
	out.containers = cloneNil(c.containers)
	out.initStatuses = cloneNil(c.initStatuses)
	out.statuses = cloneNil(c.statuses)
	out.deletion = copyTime(c.deletion)
	return &out
}

func cloneNil[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}
