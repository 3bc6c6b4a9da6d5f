package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	fakekube "knative.dev/pkg/client/injection/kube/client/fake"
	. "knative.dev/pkg/webhook/testing"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/webhook/admission"
	"github.com/istio-aux/istio-aux/webhook/admission/admissiontest"
)

func podRequest(t testing.TB, ns string, labels, annotations map[string]string) *admissionv1.AdmissionRequest {
	t.Helper()
	pod := admissiontest.Pod(labels, annotations)
	pod.Namespace = "" // as the Job controller sends it: generateName, no namespace
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		UID:       "b2f1c9e0-uid",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: ns,
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}
}

func TestAdmit(t *testing.T) {
	hold := map[string]string{keys.AnnotationProxyConfig: "holdApplicationUntilProxyStarts: true"}
	pods := func(mod func(*admissionv1.AdmissionRequest)) func(testing.TB) *admissionv1.AdmissionRequest {
		return func(t testing.TB) *admissionv1.AdmissionRequest {
			r := podRequest(t, "ml", nil, nil)
			mod(r)
			return r
		}
	}
	tests := map[string]struct {
		req     func(testing.TB) *admissionv1.AdmissionRequest
		apiOnly bool // the namespace is not in the informer cache yet
		outcome admission.Outcome
		want    map[string]string // annotations after the patch
		warning string
	}{
		"enabled namespace": {
			req: pods(func(*admissionv1.AdmissionRequest) {}), outcome: admission.Mutated, want: hold,
		},
		"enabled namespace not cached yet": {
			req: pods(func(*admissionv1.AdmissionRequest) {}), apiOnly: true, outcome: admission.Mutated, want: hold,
		},
		"namespace from the object when the request has none": {
			req: pods(func(r *admissionv1.AdmissionRequest) {
				r.Namespace = ""
				r.Object.Raw = []byte(`{"metadata":{"name":"p","namespace":"ml"},"spec":{"containers":[{"name":"app"}]}}`)
			}),
			outcome: admission.Mutated, want: hold,
		},
		"pod label in an unknown namespace": {
			req: func(t testing.TB) *admissionv1.AdmissionRequest {
				return podRequest(t, "elsewhere", map[string]string{keys.LabelEnabled: "true"}, nil)
			},
			outcome: admission.Mutated, want: hold,
		},
		"unlabelled namespace": {
			req:     func(t testing.TB) *admissionv1.AdmissionRequest { return podRequest(t, "plain", nil, nil) },
			outcome: admission.Skipped,
		},
		"update": {
			req: pods(func(r *admissionv1.AdmissionRequest) { r.Operation = admissionv1.Update }), outcome: admission.Warned, warning: "only handles CREATE",
		},
		"delete with no object": {
			req: pods(func(r *admissionv1.AdmissionRequest) {
				r.Operation, r.Object = admissionv1.Delete, runtime.RawExtension{}
			}),
			outcome: admission.Warned, warning: "only handles CREATE",
		},
		"a configmap": {
			req: pods(func(r *admissionv1.AdmissionRequest) {
				r.Kind = metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
			}),
			outcome: admission.Warned, warning: "only handles pods",
		},
		"a pod subresource": {
			req:     pods(func(r *admissionv1.AdmissionRequest) { r.SubResource = "ephemeralcontainers" }),
			outcome: admission.Warned, warning: "only handles pods",
		},
		// A body that is not JSON is no AdmissionReview (TestReviewRefuses).
		"garbage object": {
			req:     pods(func(r *admissionv1.AdmissionRequest) { r.Object.Raw = []byte(`"garbage"`) }),
			outcome: admission.Warned, warning: "not a JSON object",
		},
		// The webhook decodes only the fields it reads; the API server has
		// validated the others before it calls.
		"wrongly typed field the webhook reads": {
			req:     pods(func(r *admissionv1.AdmissionRequest) { r.Object.Raw = []byte(`{"spec":{"initContainers":"app"}}`) }),
			outcome: admission.Warned, warning: "not a Pod",
		},
		"empty object": {
			req:     pods(func(r *admissionv1.AdmissionRequest) { r.Object.Raw = nil }),
			outcome: admission.Warned, warning: "not a JSON object",
		},
		"nil request": {
			req:     func(testing.TB) *admissionv1.AdmissionRequest { return nil },
			outcome: admission.Warned, warning: "no request",
		},
		"malformed proxy config": {
			req: func(t testing.TB) *admissionv1.AdmissionRequest {
				return podRequest(t, "ml", nil, map[string]string{keys.AnnotationProxyConfig: "a: [1"})
			},
			outcome: admission.Warned, warning: "not valid YAML",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ml := namespace("ml", map[string]string{keys.LabelEnabled: "true"})
			plain := namespace("plain", nil)
			f := newFixture(t, nil, plain)
			if _, err := fakekube.Get(f.ctx).CoreV1().Namespaces().Create(f.ctx, ml, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if !tc.apiOnly {
				if err := fakens(f).Add(ml); err != nil {
					t.Fatal(err)
				}
			}
			req := tc.req(t)
			resp := admit(t, f.ctx, f.r, req)
			ExpectAllowed(t, resp)
			if tc.warning != "" {
				ExpectWarnsWith(t, resp, tc.warning)
			} else if len(resp.Warnings) > 0 {
				t.Errorf("unexpected warnings %v", resp.Warnings)
			}
			if req != nil && resp.UID != req.UID {
				t.Errorf("UID = %q, want %q", resp.UID, req.UID)
			}
			if touchesAnnotations(t, resp.Patch) != (tc.outcome == admission.Mutated) || (resp.PatchType != nil) != (resp.Patch != nil) {
				t.Fatalf("outcome %s but patch %q", tc.outcome, resp.Patch)
			}
			if tc.outcome == admission.Mutated {
				if got := admissiontest.AnnotationsAfter(t, req.Object.Raw, resp.Patch); !maps.Equal(got, tc.want) {
					t.Errorf("annotations after = %#v, want %#v", got, tc.want)
				}
			}
			if got := f.counts(t); got[tc.outcome] != 1 || len(got) != 1 {
				t.Errorf("admission counts = %v, want one %s", got, tc.outcome)
			}
		})
	}
}

// Admit behind the webhook's HTTP handler: the AdmissionReview the API
// server sends in, the review it reads back.
func TestAdmitThroughHandler(t *testing.T) {
	f := newFixture(t, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	wh := f.handler()
	for name, tc := range map[string]struct {
		op      admissionv1.Operation
		patched bool
	}{
		"create": {op: admissionv1.Create, patched: true},
		"update": {op: admissionv1.Update},
	} {
		t.Run(name, func(t *testing.T) {
			req := podRequest(t, "ml", nil, nil)
			req.Operation = tc.op
			rec := serveReview(t, wh, reviewBody(t, req))
			var review admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil || review.Response == nil {
				t.Fatalf("response %s: %v", rec.Body, err)
			}
			if !review.Response.Allowed || review.Response.UID != req.UID || review.Kind != "AdmissionReview" {
				t.Errorf("response = %+v", review.Response)
			}
			if got := review.Response.Patch != nil; got != tc.patched {
				t.Errorf("patched = %v, want %v (warnings %v)", got, tc.patched, review.Response.Warnings)
			}
			if !tc.patched && len(review.Response.Warnings) == 0 {
				t.Error("no warning for an unhandled request")
			}
		})
	}
}

func TestAdmitNamespaceUnreadable(t *testing.T) {
	f := newFixture(t, nil)
	fakekube.Get(f.ctx).PrependReactor("get", "namespaces", func(clientgotesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcd is on fire")
	})
	resp := admit(t, f.ctx, f.r, podRequest(t, "ml", nil, nil))
	ExpectAllowed(t, resp)
	ExpectWarnsWith(t, resp, "etcd is on fire")
	if resp.Patch != nil {
		t.Errorf("patched %s", resp.Patch)
	}
}

func TestAdmitFollowsMode(t *testing.T) {
	f := newFixture(t, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	f.r.config.Store(&admission.Config{Mode: admission.ModeNative})
	req := podRequest(t, "ml", nil, nil)
	resp := admit(t, f.ctx, f.r, req)
	got := admissiontest.AnnotationsAfter(t, req.Object.Raw, resp.Patch)
	if want := map[string]string{keys.AnnotationNativeSidecar: "true"}; !maps.Equal(got, want) {
		t.Errorf("annotations = %v, want %v", got, want)
	}
}

// labelsFunc is a admission.Namespaces made of a function.
type labelsFunc func(ctx context.Context, name string) (map[string]string, error)

func (f labelsFunc) Labels(ctx context.Context, name string) (map[string]string, error) {
	return f(ctx, name)
}

// Once the API server has given up on the call (its context ended), the pod
// is left unchanged: nothing will read the answer, and work should stop.
func TestAdmitRequestEnded(t *testing.T) {
	enabled := map[string]string{keys.LabelEnabled: "true"}
	tests := map[string]func(context.Context, context.CancelFunc) (context.Context, admission.Namespaces){
		"ended before the request was read": func(ctx context.Context, cancel context.CancelFunc) (context.Context, admission.Namespaces) {
			cancel()
			return ctx, labelsFunc(func(context.Context, string) (map[string]string, error) {
				t.Error("namespace read after the request ended")
				return enabled, nil
			})
		},
		"ended while the namespace was read": func(ctx context.Context, cancel context.CancelFunc) (context.Context, admission.Namespaces) {
			return ctx, labelsFunc(func(context.Context, string) (map[string]string, error) {
				cancel()
				return enabled, nil
			})
		},
	}
	for name, setup := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil)
			ctx, cancel := context.WithCancel(f.ctx)
			defer cancel()
			ctx, f.r.namespaces = setup(ctx, cancel)
			resp := admit(t, ctx, f.r, podRequest(t, "ml", nil, nil))
			ExpectAllowed(t, resp)
			ExpectWarnsWith(t, resp, "the admission request ended before istio-aux answered: context canceled")
			if resp.Patch != nil {
				t.Errorf("patched %s", resp.Patch)
			}
			if got := f.counts(t); got[admission.Warned] != 1 || len(got) != 1 {
				t.Errorf("admission counts = %v, want one warned", got)
			}
		})
	}
}
