package slim

import (
	"hash/fnv"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
}

func exited(code int32) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}
}

// jobPod is a Job-like pod with an app and a classic istio-proxy.
func jobPod(policy corev1.RestartPolicy, app corev1.ContainerState) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "1"},
		Spec: corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{
			{Name: "istio-proxy"}, {Name: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "istio-proxy", State: running()}, {Name: "app", State: app}}},
	}
}

func TestFingerprintChanges(t *testing.T) {
	base := jobPod(corev1.RestartPolicyOnFailure, exited(1))
	base.Spec.Containers = append(base.Spec.Containers, corev1.Container{Name: "vault-agent"})
	onFailure := corev1.ContainerRestartPolicyOnFailure
	cases := map[string]struct {
		mutate  func(*corev1.Pod)
		changed bool
	}{
		"nothing":              {func(*corev1.Pod) {}, false},
		"resourceVersion":      {func(p *corev1.Pod) { p.ResourceVersion = "9" }, false},
		"readiness":            {func(p *corev1.Pod) { p.Status.ContainerStatuses[0].Ready = true }, false},
		"unrelated annotation": {func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "b"} }, false},
		"unrelated label":      {func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} }, false},
		"phase":                {func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
		"deletion":             {func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }, true},
		"exit code":            {func(p *corev1.Pod) { p.Status.ContainerStatuses[1].State = exited(2) }, true},
		"state kind":           {func(p *corev1.Pod) { p.Status.ContainerStatuses[1].State = running() }, true},
		"restart count":        {func(p *corev1.Pod) { p.Status.ContainerStatuses[1].RestartCount = 1 }, true},
		"sidecars annotation names a container": {func(p *corev1.Pod) {
			p.Annotations = map[string]string{keys.AnnotationSidecars: "vault-agent"}
		}, true},
		// Churning the annotation with names that are no container of the
		// pod changes nothing the decision reads: no new event per update.
		"sidecars annotation names no container": {func(p *corev1.Pod) {
			p.Annotations = map[string]string{keys.AnnotationSidecars: "x1, x2,x3"}
		}, false},
		"sidecars annotation respelled": {func(p *corev1.Pod) {
			p.Annotations = map[string]string{keys.AnnotationSidecars: " , nope"}
		}, false},
		"init container state": {func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: exited(0)}}
		}, true},
		"native sidecar": {func(p *corev1.Pod) {
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers = []corev1.Container{{Name: "istio-proxy", RestartPolicy: &always}}
		}, true},
		"container restart policy": {func(p *corev1.Pod) { p.Spec.Containers[1].RestartPolicy = &onFailure }, true},
		"container restart rule": {func(p *corev1.Pod) {
			p.Spec.Containers[1].RestartPolicy = &onFailure
			p.Spec.Containers[1].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: "Restart",
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: "In", Values: []int32{42}}}}
		}, true},
	}
	want := Fingerprint(Of(base))
	for name, tc := range cases {
		p := base.DeepCopy()
		tc.mutate(p)
		if got := Fingerprint(Of(p)) != want; got != tc.changed {
			t.Errorf("%s: fingerprint changed = %v, want %v", name, got, tc.changed)
		}
	}
	// Two annotations naming the same containers in another order are one state.
	a, b := base.DeepCopy(), base.DeepCopy()
	a.Spec.Containers = append(a.Spec.Containers, corev1.Container{Name: "fluent-bit"})
	b.Spec.Containers = a.Spec.Containers
	a.Annotations = map[string]string{keys.AnnotationSidecars: "vault-agent,fluent-bit"}
	b.Annotations = map[string]string{keys.AnnotationSidecars: "fluent-bit, vault-agent, vault-agent"}
	if Fingerprint(Of(a)) != Fingerprint(Of(b)) {
		t.Error("the same sidecar set spelled two ways fingerprints differently")
	}
}

func TestDedupID(t *testing.T) {
	if got := DedupID("u", 0xabc); got != "u/abc" {
		t.Errorf("DedupID = %q", got)
	}
}

// TestFingerprintIsStable: the fingerprint is part of every dedup id
// (DedupID) a running bridge, a restarted one and the bucket of final
// failures compare: a new version must hash every state as the last did.
// fingerprintV1 is the first implementation (hash/fnv, a string per field).
func TestFingerprintIsStable(t *testing.T) {
	pods := []*Pod{rich(), Of(fullPod()), {}}
	base := jobPod(corev1.RestartPolicyOnFailure, exited(1))
	for _, code := range []int32{-1, 0, 7, 255, 1 << 30} {
		p := base.DeepCopy()
		p.Status.ContainerStatuses[1].State = exited(code)
		p.Status.ContainerStatuses[1].RestartCount = code
		p.Annotations = map[string]string{keys.AnnotationSidecars: "app, istio-proxy,x"}
		pods = append(pods, Of(p))
	}
	for i, p := range pods {
		if got, want := Fingerprint(p), fingerprintV1(p); got != want {
			t.Errorf("pod %d: fingerprint %x, was %x", i, got, want)
		}
	}
	// Nothing but the sidecars annotation's names, when there are some.
	plain := Of(base)
	if n := testing.AllocsPerRun(100, func() { Fingerprint(plain) }); n > 0 {
		t.Errorf("Fingerprint allocates %v times a pod", n)
	}
}

func fingerprintV1(p *Pod) uint64 {
	h := fnv.New64a()
	var buf []byte
	field := func(s string) {
		buf = append(buf[:0], s...)
		buf = append(buf, 0)
		_, _ = h.Write(buf)
	}
	field(string(p.Status.Phase))
	field(strconv.FormatBool(p.DeletionTimestamp != nil))
	field(string(p.Spec.RestartPolicy))
	containers := func(kind string, cs Containers) {
		for _, c := range cs {
			field(kind + c.Name)
			if c.RestartPolicy != nil {
				field(string(*c.RestartPolicy))
			}
			for _, r := range c.RestartPolicyRules {
				field(string(r.Action))
				if r.ExitCodes != nil {
					field(string(r.ExitCodes.Operator))
					for _, v := range r.ExitCodes.Values {
						field(strconv.Itoa(int(v)))
					}
				}
			}
		}
	}
	containers("init-spec:", p.Spec.InitContainers)
	containers("spec:", p.Spec.Containers)
	named := p.AnnotatedSidecars()
	slices.Sort(named)
	for _, n := range named {
		if slices.ContainsFunc(p.Spec.Containers, func(c Container) bool { return c.Name == n }) {
			field("sidecar:" + n)
		}
	}
	statuses := func(kind string, ss Statuses) {
		for _, s := range ss {
			field(kind + s.Name)
			field(stateKey(s.State))
			field(strconv.Itoa(int(s.RestartCount)))
		}
	}
	statuses("init:", p.Status.InitContainerStatuses)
	statuses("app:", p.Status.ContainerStatuses)
	return h.Sum64()
}
