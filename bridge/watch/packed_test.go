package watch

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/pkg/slim"
)

func TestPackUnpacks(t *testing.T) {
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
	for name, full := range cases {
		before := full.DeepCopy()
		obj, err := PackTransform(full)
		if err != nil {
			t.Fatal(err)
		}
		c := obj.(*Packed)
		if d := cmp.Diff(slim.Of(full), c.Unpack()); d != "" {
			t.Errorf("%s: Unpack differs from Of (-want +got):\n%s", name, d)
		}
		if !cmp.Equal(before, full) {
			t.Errorf("%s: PackTransform mutated its input", name)
		}
		// What Unpack returns is the caller's: changing it leaves the cache alone.
		p := c.Unpack()
		if p.Labels != nil {
			p.Labels["a"] = "changed"
		}
		if len(p.Spec.InitContainers) > 1 {
			*p.Spec.InitContainers[1].RestartPolicy = corev1.ContainerRestartPolicy("Never")
		}
		if d := cmp.Diff(slim.Of(full), c.Unpack()); d != "" {
			t.Errorf("%s: changing Unpack's result reached the cache:\n%s", name, d)
		}
		cp := c.DeepCopyObject().(*Packed)
		if d := cmp.Diff(c.Unpack(), cp.Unpack()); d != "" {
			t.Errorf("%s: DeepCopyObject differs:\n%s", name, d)
		}
		if len(cp.statuses) > 0 {
			cp.statuses[0].exitCode = 99
			if c.statuses[0].exitCode == 99 {
				t.Errorf("%s: DeepCopyObject shares statuses", name)
			}
		}
		if key, err := cache.MetaNamespaceKeyFunc(c); err != nil || key != cache.NewObjectName(full.Namespace, full.Name).String() {
			t.Errorf("%s: key %q, %v", name, key, err)
		}
		if ns, err := cache.MetaNamespaceIndexFunc(c); err != nil || len(ns) != 1 || ns[0] != full.Namespace {
			t.Errorf("%s: namespace index %q, %v", name, ns, err)
		}
	}
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
