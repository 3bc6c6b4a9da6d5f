package podevent

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
	"github.com/istio-aux/istio-aux/pkg/slim/slimtest"
)

func fullPod() *corev1.Pod { return slimtest.FullPod() }

func TestDecodedDecidesLikeTheFullPod(t *testing.T) {
	type variant func(*corev1.Pod)
	variants := map[string]variant{
		"as is":      func(*corev1.Pod) {},
		"app failed": func(p *corev1.Pod) { p.Status.ContainerStatuses[1].State.Terminated.ExitCode = 3 },
		"never":      func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever },
		"app running": func(p *corev1.Pod) {
			p.Status.ContainerStatuses[1].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		},
		"proxy terminated": func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
		},
		// A zero metav1.Time encodes as null, so use a real instant.
		"deleting":  func(p *corev1.Pod) { ts := metav1.Unix(1_700_000_100, 0); p.DeletionTimestamp = &ts },
		"succeeded": func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded },
		"native proxy": func(p *corev1.Pod) {
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "istio-proxy", RestartPolicy: &always})
		},
		"no sidecar annotation": func(p *corev1.Pod) { delete(p.Annotations, keys.AnnotationSidecars) },
		// Container-level policy and rules travel too (Kubernetes 1.35+).
		"app Never under OnFailure, exit 3": func(p *corev1.Pod) {
			never := corev1.ContainerRestartPolicyNever
			p.Spec.Containers[1].RestartPolicy = &never
			p.Status.ContainerStatuses[1].State.Terminated.ExitCode = 3
		},
		"a rule retries exit 3": func(p *corev1.Pod) {
			never := corev1.ContainerRestartPolicyNever
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
			p.Spec.Containers[1].RestartPolicy = &never
			p.Spec.Containers[1].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{3}}}}
			p.Status.ContainerStatuses[1].State.Terminated.ExitCode = 3
		},
	}
	for name, mutate := range variants {
		full := fullPod()
		mutate(full)
		e, err := New("https://api", slim.Of(full))
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := Decode(e)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// What an ApiServerSource sends: the whole pod.
		apiserver := e.Clone()
		apiserver.SetType(TypeAPIServerUpdate)
		if err := apiserver.SetData(cloudevents.ApplicationJSON, full); err != nil {
			t.Fatal(err)
		}
		fromFull, err := Decode(apiserver)
		if err != nil {
			t.Fatalf("%s: full pod: %v", name, err)
		}
		opts := decision.Options{ExtraSidecars: []string{"fluent-bit"}}
		want := decision.Decide(slim.Of(full), opts)
		if got := decision.Decide(decoded, opts); got != want {
			t.Errorf("%s: decoded slim pod decides %v, full pod %v", name, got, want)
		}
		if got := decision.Decide(fromFull, opts); got != want {
			t.Errorf("%s: decoded full pod decides %v, full pod %v", name, got, want)
		}
	}
}

func TestNewDecodeRoundTrip(t *testing.T) {
	full := fullPod()
	e, err := New("https://127.0.0.1:6443", slim.Of(full))
	if err != nil {
		t.Fatal(err)
	}
	for got, want := range map[string]string{
		e.ID(): "uid-1/42", e.Type(): TypePodUpdated, e.Source(): "https://127.0.0.1:6443",
		e.Subject(): "/apis/v1/namespaces/kubeflow/pods/mnist-worker-0", e.DataContentType(): cloudevents.ApplicationJSON,
	} {
		if got != want {
			t.Errorf("attribute %q, want %q", got, want)
		}
	}
	for ext, want := range map[string]string{ExtNamespace: "kubeflow", ExtName: "mnist-worker-0", ExtKind: "Pod", ExtAPIVersion: "v1"} {
		if got := e.Extensions()[ext]; got != want {
			t.Errorf("extension %s = %v, want %s", ext, got, want)
		}
	}
	// Through the wire format and back.
	raw, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var back cloudevents.Event
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	pod, err := Decode(back)
	if err != nil {
		t.Fatal(err)
	}
	// The event carries what the decision reads of the pod, no more.
	if d := cmp.Diff(decision.Inputs(slim.Of(full)), pod); d != "" {
		t.Errorf("decoded pod (-want +got):\n%s", d)
	}
	if len(e.Data()) > 2048 {
		t.Errorf("slim event data is %d bytes; the full pod's noise leaked in", len(e.Data()))
	}
}

func TestDecodeRejects(t *testing.T) {
	good := func() cloudevents.Event {
		e, err := New("src", slim.Of(fullPod()))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	cases := map[string]func(*cloudevents.Event){
		"wrong type":       func(e *cloudevents.Event) { e.SetType("com.example.other") },
		"subject mismatch": func(e *cloudevents.Event) { e.SetSubject(Subject("kubeflow", "other")) },
		"namespace ext":    func(e *cloudevents.Event) { e.SetExtension(ExtNamespace, "elsewhere") },
		"name ext":         func(e *cloudevents.Event) { e.SetExtension(ExtName, "other") },
		"no data":          func(e *cloudevents.Event) { e.DataEncoded = nil },
		"not JSON":         func(e *cloudevents.Event) { _ = e.SetData("text/plain", []byte("hello")) },
		"broken JSON":      func(e *cloudevents.Event) { e.DataEncoded = []byte(`{"metadata":`) },
		"oversize": func(e *cloudevents.Event) {
			e.DataEncoded = []byte(`{"x":"` + strings.Repeat("a", MaxDataBytes) + `"}`)
		},
		"not a pod": func(e *cloudevents.Event) {
			e.DataEncoded = []byte(`{"kind":"Secret","metadata":{"name":"mnist-worker-0","namespace":"kubeflow","uid":"u"}}`)
		},
		"pod without uid": func(e *cloudevents.Event) {
			e.DataEncoded = []byte(`{"metadata":{"name":"mnist-worker-0","namespace":"kubeflow"}}`)
		},
		"missing id":        func(e *cloudevents.Event) { e.SetID("") },
		"missing source":    func(e *cloudevents.Event) { e.SetSource("") },
		"data is JSON text": func(e *cloudevents.Event) { e.DataEncoded = []byte(`"a string"`) },
		"too many containers": func(e *cloudevents.Event) {
			e.DataEncoded = []byte(`{"metadata":{"name":"mnist-worker-0","namespace":"kubeflow","uid":"u"},"spec":{"containers":[` +
				strings.Repeat(`{},`, slim.MaxContainers) + `{}]}}`)
		},
	}
	for name, mutate := range cases {
		e := good()
		mutate(&e)
		if _, err := Decode(e); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Decode err = %v, want ErrInvalid", name, err)
		}
	}
	for _, typ := range []string{TypeAPIServerAdd, TypeAPIServerUpdate, TypeAPIServerDelete} {
		e := good()
		e.SetType(typ)
		if _, err := Decode(e); err != nil {
			t.Errorf("ApiServerSource type %s rejected: %v", typ, err)
		}
	}
}

func TestID(t *testing.T) {
	if got := ID("uid-1", "42"); got != "uid-1/42" {
		t.Errorf("ID = %q", got)
	}
	if ID("u", "42") == ID("u", "43") {
		t.Error("two resource versions share an id")
	}
}

// TestPodBeyondTheBoundsTravelsAsItsIdentity: row 7 of the README's
// attacks, a valid pod with more app containers than the decoder's bound.
// Its event names it (and says so), carries none of its lists, and decodes;
// an ApiServerSource event with the whole pod does not, but still tells
// which pod it is.
func TestPodBeyondTheBoundsTravelsAsItsIdentity(t *testing.T) {
	p := &slim.Pod{APIVersion: "v1", Kind: "Pod", Meta: slim.Meta{Name: "wide", Namespace: "ns", UID: "u", ResourceVersion: "3"},
		Spec: slim.Spec{RestartPolicy: "Never", Containers: slim.Containers{{Name: "istio-proxy"}}}}
	for i := range slim.MaxContainers {
		p.Spec.Containers = append(p.Spec.Containers, slim.Container{Name: fmt.Sprintf("app-%d", i)})
	}
	e, err := New("src", p)
	if err != nil {
		t.Fatal(err)
	}
	if !IdentityOnly(e) || len(e.Data()) > 512 {
		t.Fatalf("identity only %v, %d bytes of data", IdentityOnly(e), len(e.Data()))
	}
	got, err := Decode(e)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "wide" || got.UID != "u" || got.ResourceVersion != "3" || len(got.Spec.Containers) != 0 {
		t.Errorf("decoded %+v", got)
	}
	within, err := New("src", &slim.Pod{Meta: p.Meta, Spec: slim.Spec{Containers: p.Spec.Containers[:slim.MaxContainers]}})
	if err != nil || IdentityOnly(within) {
		t.Errorf("a pod at the bound travels as its identity: %v", err)
	}

	full := e.Clone()
	full.SetType(TypeAPIServerUpdate)
	if err := full.SetData(cloudevents.ApplicationJSON, p); err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(full); !errors.Is(err, slim.ErrBeyondBounds) || !errors.Is(err, ErrInvalid) {
		t.Errorf("the whole pod decoded: %v", err)
	}
	id, err := DecodeIdentity(full)
	if err != nil || id.Name != "wide" || id.Namespace != "ns" || id.UID != "u" {
		t.Errorf("DecodeIdentity = %+v, %v", id, err)
	}
	forged := full.Clone()
	forged.SetSubject(Subject("kube-system", "coredns"))
	if _, err := DecodeIdentity(forged); err == nil {
		t.Error("DecodeIdentity believed a subject naming another pod")
	}
}
