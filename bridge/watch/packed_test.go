package watch

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/decision/decisiontest"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// seedPods are pods as the API server holds them, with fields the cache
// drops and fields it keeps.
func seedPods() map[string]*corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	at := metav1.Unix(1_700_000_000, 0)
	cases := map[string]*corev1.Pod{
		"empty": {},
		"empty maps, zero times": {
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
				{Name: "a", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
				{Name: "b", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}},
				{Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.Unix(0, 0)}}},
			}},
		},
		"job pod": {
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "7", DeletionTimestamp: &at,
				Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"istio-aux.dev/sidecars": "x", "noise": "y"},
				OwnerReferences: []metav1.OwnerReference{{Name: "job"}}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure, NodeName: "n",
				InitContainers: []corev1.Container{{Name: "init", Image: "i"}, {Name: "istio-proxy", RestartPolicy: &always}},
				Containers:     []corev1.Container{{Name: "app", Image: "a", Args: []string{"x"}}, {Name: "x"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: at, Message: "m"}}}},
				ContainerStatuses: []corev1.ContainerStatus{
					{Name: "app", Ready: true, RestartCount: 3, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}},
					{Name: "x", ImageID: "sha", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "m"}}},
					{Name: "gone", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}},
					{Name: "unknown"},
				}},
		},
	}
	// Container restart rules (Kubernetes 1.35), which the decision reads.
	never := corev1.ContainerRestartPolicyNever
	cases["restart rules"] = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "app", RestartPolicy: &never,
			RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42, 43}}}}}}},
	}
	return cases
}

// TestPackKeepsEveryDecision: for the seed pods and 20,000 random ones, the
// packed pod decides as the pod does under every configuration, opts in
// as it does in every namespace and scope, has its fingerprint, and its
// event carries the same inputs but for what may differ (the statuses'
// order, the sidecars annotation's names that name no container).
func TestPackKeepsEveryDecision(t *testing.T) {
	configs := []decision.Options{{}, {QuitNative: true}, {ExtraSidecars: []string{"b"}}, {ExtraSidecars: []string{"a", "c"}, QuitNative: true}}
	nsLabels := []map[string]string{nil, {keys.LabelEnabled: "true"}, {keys.LabelEnabled: keys.LabelEnabledPods}}
	check := func(name string, p *slim.Pod) {
		t.Helper()
		c := Pack(p)
		got := c.Unpack()
		for _, o := range configs {
			if want, got := decision.Decide(p, o), decision.Decide(got, o); got != want {
				t.Fatalf("%s: Decide = %v packed, %v from the pod %s", name, got, want, cmp.Diff(nil, p))
			}
		}
		for _, ns := range nsLabels {
			if decision.OptedIn(ns, p.Labels, p.Annotations) != decision.OptedIn(ns, got.Labels, got.Annotations) ||
				ScopeOf(ns).Admits(p.Labels) != ScopeOf(ns).Admits(got.Labels) || ScopeOf(ns).Admits(p.Labels) != c.admittedBy(ScopeOf(ns)) {
				t.Fatalf("%s: the opt-in differs in namespace %v (labels %v annotations %v, packed %v %v)", name, ns, p.Labels, p.Annotations, got.Labels, got.Annotations)
			}
		}
		if c.Fingerprint() != slim.Fingerprint(p) {
			t.Fatalf("%s: fingerprint %x, want %x", name, c.Fingerprint(), slim.Fingerprint(p))
		}
		if d := cmp.Diff(comparable(decision.Inputs(p)), comparable(decision.Inputs(got))); d != "" {
			t.Fatalf("%s: the event's inputs differ (-pod +packed):\n%s", name, d)
		}
		if got.Name != p.Name || got.Namespace != p.Namespace || got.UID != p.UID || got.ResourceVersion != p.ResourceVersion ||
			!cmp.Equal(got.DeletionTimestamp, p.DeletionTimestamp) {
			t.Fatalf("%s: identity %v, want %v", name, got.Meta, p.Meta)
		}
	}
	for name, full := range seedPods() {
		before := full.DeepCopy()
		obj, err := PackTransform(full)
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(before, full) {
			t.Errorf("%s: PackTransform mutated its input", name)
		}
		c := obj.(*Packed)
		check(name, slim.Of(full))
		// What Unpack returns is the caller's: changing it leaves the cache alone.
		want := c.Unpack()
		p := c.Unpack()
		if p.Labels != nil {
			p.Labels[keys.LabelEnabled] = "changed"
		}
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].Name = "changed"
			if p.Spec.Containers[i].RestartPolicy != nil {
				*p.Spec.Containers[i].RestartPolicy = "changed"
			}
		}
		if d := cmp.Diff(want, c.Unpack()); d != "" {
			t.Errorf("%s: changing Unpack's result reached the cache:\n%s", name, d)
		}
		cp := c.DeepCopyObject().(*Packed)
		if d := cmp.Diff(c.Unpack(), cp.Unpack()); d != "" {
			t.Errorf("%s: DeepCopyObject differs:\n%s", name, d)
		}
		if len(cp.containers) > 0 {
			cp.containers[0].exitCode = 99
			if c.containers[0].exitCode == 99 {
				t.Errorf("%s: DeepCopyObject shares containers", name)
			}
		}
		if key, err := cache.MetaNamespaceKeyFunc(c); err != nil || key != cache.NewObjectName(full.Namespace, full.Name).String() {
			t.Errorf("%s: key %q, %v", name, key, err)
		}
		if ns, err := cache.MetaNamespaceIndexFunc(c); err != nil || len(ns) != 1 || ns[0] != full.Namespace {
			t.Errorf("%s: namespace index %q, %v", name, ns, err)
		}
	}
	r := rand.New(rand.NewPCG(4, 3))
	for i := range 20_000 {
		check(fmt.Sprintf("random pod %d", i), decisiontest.RandomPod(r))
	}
}

// comparable is in with what packing may change put in one form: statuses
// by name, the sidecars annotation as the set of the containers it names.
func comparable(in *slim.Pod) *slim.Pod {
	out := *in
	out.Status.ContainerStatuses = slices.Clone(in.Status.ContainerStatuses)
	slices.SortStableFunc(out.Status.ContainerStatuses, func(a, b slim.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
	// Of a name's statuses the decision reads the first: so does packing.
	out.Status.ContainerStatuses = slices.CompactFunc(out.Status.ContainerStatuses, func(a, b slim.ContainerStatus) bool { return a.Name == b.Name })
	out.Status.ContainerStatuses = slices.DeleteFunc(out.Status.ContainerStatuses, func(s slim.ContainerStatus) bool {
		return !slices.ContainsFunc(in.Spec.Containers, func(c slim.Container) bool { return c.Name == s.Name })
	})
	if len(out.Status.ContainerStatuses) == 0 {
		out.Status.ContainerStatuses = nil
	}
	out.Annotations = maps.Clone(in.Annotations)
	var named []string
	for _, n := range in.AnnotatedSidecars() {
		if slices.ContainsFunc(in.Spec.Containers, func(c slim.Container) bool { return c.Name == n }) {
			named = append(named, n)
		}
	}
	slices.Sort(named)
	delete(out.Annotations, keys.AnnotationSidecars)
	if len(named) > 0 {
		out.Annotations[keys.AnnotationSidecars] = strings.Join(named, ",")
	}
	if len(out.Annotations) == 0 {
		out.Annotations = nil
	}
	// The label as the opt-in and the scope read it.
	out.Labels = optInOf(in.Labels[keys.LabelEnabled], in.Labels != nil && in.Labels[keys.LabelEnabled] != "").kept(keys.LabelEnabled)
	return &out
}

func TestPackTransformTombstone(t *testing.T) {
	full := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{"big": "x"}}}
	obj, err := PackTransform(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: full})
	if err != nil {
		t.Fatal(err)
	}
	tomb := obj.(cache.DeletedFinalStateUnknown)
	c, ok := tomb.Obj.(*Packed)
	if !ok || c.Name() != "p" || c.Namespace() != "ns" || c.Unpack().Annotations != nil {
		t.Errorf("tombstone not packed: %#v", tomb.Obj)
	}
	if key, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(tomb); key != "ns/p" {
		t.Errorf("tombstone key %q", key)
	}
	if other, _ := PackTransform("not a pod"); other != "not a pod" {
		t.Error("PackTransform changed an object it does not know")
	}
}
