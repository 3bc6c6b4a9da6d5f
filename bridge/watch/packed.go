package watch

import (
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// Packed is a pod as the bridge's caches hold it: what the quit decision
// and the opt-in read of it now (decision.Inputs), and the fingerprint of
// its state. The caches hold every pod served for as long as the bridge
// runs, so its size is the bridge's memory per pod, and it is bounded by
// what the decision needs, never by what a pod's owner writes:
//
//   - of the labels and annotations, the opt-in's when they say true or
//     false, as a small code, and of the sidecars annotation only which of
//     the pod's containers its first slim.MaxSidecars names name, as a flag
//     on each (a 200 KiB annotation costs one bit per container);
//   - per container, its name (all names in one string), its restart
//     policy, its state's kind and exit code, and for an app that
//     terminated the action of the one restart rule that decides its exit
//     code; of the init containers only a native istio-proxy, with its
//     state, and whether Istio CNI's start race left the pod unable to
//     start (one bit); no reasons, times, messages or restart counts (the
//     fingerprint, computed when the pod is packed, covers those);
//   - strings pods share (namespace, phase, policies, actions) as
//     unique.Handles: one copy per distinct value in the process.
//
// What is left grows with the pod's name (at most 253 bytes) and its
// containers (at most 63 bytes of name and 32 of the rest each): a pod
// counts against the capacity by what it holds (Units). Unpack returns
// the decision's inputs; Decide, OptedIn and Scope.Admits answer on it as
// on the pod it was packed from (TestPackKeepsEveryDecision).
type Packed struct {
	name, uid, resourceVersion string // unique per pod: not interned
	namespace                  handle
	restartPolicy, phase       handle
	deletion                   *metav1.Time
	fingerprint                uint64
	// names holds every container's name, one after the other.
	names      string
	containers []packedContainer
	// label and annotation are the opt-in label's and annotation's values.
	label, annotation optIn
	// nativeProxy: istio-proxy is a native sidecar (an init container with
	// restartPolicy Always), whose state is nativeState.
	nativeProxy bool
	// cniRaced: the pod met Istio CNI's start race (decision.CNIRaced);
	// its istio-validation is decision.RacedValidation. It fills a byte
	// the struct's alignment leaves free.
	cniRaced    bool
	nativeState packedState
	units       int32
}

type handle = unique.Handle[string]

func intern(s string) handle { return unique.Make(s) }

// optIn is an opt-in label's or annotation's value, as OptedIn and
// Scope.Admits read it.
type optIn uint8

const (
	optInNone      optIn = iota // absent, or a value that says neither
	optInTrue                   // "true", exactly: Scope.Admits reads only that
	optInTrueOther              // "True", "TRUE": true to OptedIn only
	optInFalse
)

// optInOf is the code of value. Label values cannot hold spaces, and
// decision.Inputs gives annotations trimmed and in lower case.
func optInOf(value string, ok bool) optIn {
	switch {
	case !ok:
		return optInNone
	case value == "true":
		return optInTrue
	case strings.EqualFold(strings.TrimSpace(value), "true"):
		return optInTrueOther
	case strings.EqualFold(strings.TrimSpace(value), "false"):
		return optInFalse
	}
	return optInNone
}

func (o optIn) String() string {
	return [...]string{"", "true", "True", "false"}[o]
}

// kept is key set to o's value, or nil if o has none.
func (o optIn) kept(key string) slim.Kept { //nolint:unparam // the label's key and the annotation's are one string today, two keys in the API
	if o == optInNone {
		return nil
	}
	return slim.Kept{key: o.String()}
}

// packedContainer is one regular container: its name (names[at:at+n]), its
// state, and what decides whether the kubelet runs it again. 32 bytes.
type packedContainer struct {
	at, n    uint32
	exitCode int32 // of its state, when terminated
	kind     uint8 // of its state
	flags    uint8
	policy   handle // when flagPolicy
	action   handle // when flagRule: the action of the rule matching its exit code
}

func (pc *packedContainer) state() packedState {
	return packedState{exitCode: pc.exitCode, kind: pc.kind}
}

// packedContainer flags.
const (
	flagPolicy  uint8 = 1 << iota // it has its own restartPolicy
	flagRule                      // a restart rule matches its exit code
	flagSidecar                   // the sidecars annotation names it
)

// packedState is a container's status: which state, and a terminated
// container's exit code.
type packedState struct {
	exitCode int32
	kind     uint8
}

// packedState kinds.
const (
	stateNone       uint8 = iota // no status
	stateBlank                   // a status without a state
	stateWaiting                 //
	stateRunning                 //
	stateTerminated              //
)

func stateOf(s *slim.ContainerStatus) packedState {
	switch {
	case s == nil:
		return packedState{kind: stateNone}
	case s.State.Terminated != nil:
		return packedState{kind: stateTerminated, exitCode: s.State.Terminated.ExitCode}
	case s.State.Running != nil:
		return packedState{kind: stateRunning}
	case s.State.Waiting != nil:
		return packedState{kind: stateWaiting}
	}
	return packedState{kind: stateBlank}
}

// status is the slim status of a container named name in state s, nil when
// it has none.
func (s packedState) status(name string) *slim.ContainerStatus {
	out := &slim.ContainerStatus{Name: name}
	switch s.kind {
	case stateNone:
		return nil
	case stateTerminated:
		out.State.Terminated = &slim.Terminated{ExitCode: s.exitCode}
	case stateRunning:
		out.State.Running = &slim.Running{}
	case stateWaiting:
		out.State.Waiting = &slim.Waiting{}
	}
	return out
}

// PackTransform is Of, then Pack, as a cache.TransformFunc. Tombstones are
// packed too; other objects pass through.
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
	in := decision.Inputs(p)
	label, hasLabel := p.Labels[keys.LabelEnabled]
	annotation, hasAnnotation := in.Annotations[keys.AnnotationEnabled]
	out := &Packed{
		name:            p.Name,
		uid:             string(p.UID),
		resourceVersion: p.ResourceVersion,
		namespace:       intern(p.Namespace),
		restartPolicy:   intern(string(p.Spec.RestartPolicy)),
		phase:           intern(string(p.Status.Phase)),
		deletion:        copyTime(p.DeletionTimestamp),
		fingerprint:     slim.Fingerprint(p),
		label:           optInOf(label, hasLabel),
		annotation:      optInOf(annotation, hasAnnotation),
		nativeProxy:     len(in.Spec.InitContainers) > 0,
		cniRaced:        decision.CNIRaced(p),
	}
	if out.nativeProxy {
		out.nativeState = stateOf(in.ContainerStatus(keys.ProxyContainer, true))
	}
	sidecars := p.AnnotatedSidecars()
	var names strings.Builder
	size := 0
	for _, c := range in.Spec.Containers {
		size += len(c.Name)
	}
	names.Grow(size) // one allocation of the size heapBytes counts
	for _, c := range in.Spec.Containers {
		names.WriteString(c.Name)
	}
	out.names = names.String()
	if len(in.Spec.Containers) > 0 {
		out.containers = make([]packedContainer, len(in.Spec.Containers))
	}
	at := 0
	for i, c := range in.Spec.Containers {
		st := stateOf(in.ContainerStatus(c.Name, false))
		pc := packedContainer{at: uint32(at), n: uint32(len(c.Name)), exitCode: st.exitCode, kind: st.kind}
		at += len(c.Name)
		if c.RestartPolicy != nil {
			pc.flags |= flagPolicy
			pc.policy = intern(string(*c.RestartPolicy))
		}
		// Inputs keeps, of a terminated app's rules, the one that matches
		// its exit code, narrowed to that code: its action is all it says.
		if len(c.RestartPolicyRules) > 0 {
			pc.flags |= flagRule
			pc.action = intern(string(c.RestartPolicyRules[0].Action))
		}
		for _, n := range sidecars {
			if n == c.Name {
				pc.flags |= flagSidecar
			}
		}
		out.containers[i] = pc
	}
	out.units = int32(unitsOf(out.heapBytes()))
	return out
}

func copyTime(t *metav1.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// Unpack returns the decision's inputs of the pod c was packed from:
// decision.Inputs of it, but for the order of the statuses (by container)
// and the names of the sidecars annotation (those of its containers it
// names). Decide, OptedIn and Scope.Admits answer on it as on the pod. It
// shares no maps or slices with c, so callers may do anything with it
// without touching the cache.
func (c *Packed) Unpack() *slim.Pod {
	p := &slim.Pod{
		APIVersion: "v1",
		Kind:       "Pod",
		Meta: slim.Meta{
			Name:              c.name,
			Namespace:         c.namespace.Value(),
			UID:               types.UID(c.uid),
			ResourceVersion:   c.resourceVersion,
			DeletionTimestamp: copyTime(c.deletion),
			Labels:            c.label.kept(keys.LabelEnabled),
			Annotations:       c.annotation.kept(keys.AnnotationEnabled),
		},
		Spec:   slim.Spec{RestartPolicy: corev1.RestartPolicy(c.restartPolicy.Value())},
		Status: slim.Status{Phase: corev1.PodPhase(c.phase.Value())},
	}
	if c.nativeProxy {
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = slim.Containers{{Name: keys.ProxyContainer, RestartPolicy: &always}}
		if s := c.nativeState.status(keys.ProxyContainer); s != nil {
			p.Status.InitContainerStatuses = slim.Statuses{*s}
		}
	}
	if c.cniRaced {
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, decision.RacedValidation())
	}
	var sidecars []string
	for _, pc := range c.containers {
		name := c.names[pc.at : pc.at+pc.n]
		out := slim.Container{Name: name}
		if pc.flags&flagPolicy != 0 {
			policy := corev1.ContainerRestartPolicy(pc.policy.Value())
			out.RestartPolicy = &policy
		}
		if pc.flags&flagRule != 0 {
			out.RestartPolicyRules = slim.Rules{{Action: corev1.ContainerRestartRuleAction(pc.action.Value()),
				ExitCodes: &slim.ExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: slim.Codes{pc.exitCode}}}}
		}
		if pc.flags&flagSidecar != 0 {
			sidecars = append(sidecars, name)
		}
		p.Spec.Containers = append(p.Spec.Containers, out)
		if s := pc.state().status(name); s != nil {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, *s)
		}
	}
	if len(sidecars) > 0 {
		if p.Annotations == nil {
			p.Annotations = slim.Kept{}
		}
		p.Annotations[keys.AnnotationSidecars] = strings.Join(sidecars, ",")
	}
	return p
}

// Fingerprint is slim.Fingerprint of the pod c was packed from.
func (c *Packed) Fingerprint() uint64 { return c.fingerprint }

// Units is what the pod counts against the watcher's capacity (unitsOf).
func (c *Packed) Units() int { return int(c.units) }

// admittedBy reports whether scope s admits the pod (Scope.Admits on its
// labels).
func (c *Packed) admittedBy(s Scope) bool {
	return s.Admits(c.label.kept(keys.LabelEnabled))
}

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

// DeepCopyObject returns an independent copy. Handles and strings are
// immutable values, so copying the containers suffices.
func (c *Packed) DeepCopyObject() runtime.Object {
	out := *c
	if c.containers != nil {
		out.containers = append(make([]packedContainer, 0, len(c.containers)), c.containers...)
	}
	out.deletion = copyTime(c.deletion)
	return &out
}
