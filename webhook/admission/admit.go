package admission

import (
	"context"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var podKind = metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "Pod"}

// Namespaces answers a namespace's labels (the webhook: its informer's
// cache, then the API for a namespace the cache does not hold yet).
type Namespaces interface {
	Labels(ctx context.Context, name string) (map[string]string, error)
}

// Admit answers one admission request, and says what it decided. It always
// allows: a webhook that sits in front of every opted-in pod must never be
// the reason a Job cannot start. What it cannot handle it lets through
// unchanged, with an admission warning for the client (the Mutation's
// Warning; the caller logs it for the operator).
func Admit(ctx context.Context, req *Request, namespaces Namespaces, mode Mode) (Mutation, *admissionv1.AdmissionResponse) {
	resp := &admissionv1.AdmissionResponse{Allowed: true}
	if req != nil {
		resp.UID = req.UID
	}
	m, patch := admit(ctx, req, namespaces, mode)
	if patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
	}
	if m.Outcome == Warned {
		resp.Warnings = []string{m.Warning}
	}
	return m, resp
}

// admit returns the mutation for a request and, when it mutates, its patch.
func admit(ctx context.Context, req *Request, namespaces Namespaces, mode Mode) (Mutation, []byte) {
	warn := func(reason string, err error) (Mutation, []byte) {
		return Mutation{Outcome: Warned, Reason: reason, Warning: "istio-aux left the object unchanged: " + err.Error()}, nil
	}
	// The API server stops waiting at the webhook's timeoutSeconds (3 as
	// installed) and closes the request, which ends ctx: from then on an
	// answer reaches no one (the call failed, and refused the pod).
	if err := ctx.Err(); err != nil {
		return warn(ReasonRequestEnded, requestEnded(err))
	}
	switch {
	case req == nil:
		return warn("empty request", errors.New("the admission review has no request"))
	case req.Operation != admissionv1.Create:
		return warn("not a create", errors.New("istio-aux only handles CREATE, got "+string(req.Operation)))
	case req.Kind != podKind || req.SubResource != "":
		return warn("not a pod", errors.New("istio-aux only handles pods, got "+req.Kind.String()+" "+req.SubResource))
	case req.objectErr != nil:
		return warn("undecodable pod", req.objectErr)
	}
	pod := req.Object
	// Pods created by controllers usually carry no namespace in the object.
	namespace := req.Namespace
	if namespace == "" && pod.Metadata != nil {
		namespace = pod.Metadata.Namespace
	}
	labels, err := namespaces.Labels(ctx, namespace)
	if err != nil {
		return warn("namespace unreadable", err)
	}
	m := Mutate(pod, labels, mode)
	if m.Key == "" && !m.Label {
		return m, nil
	}
	if err := ctx.Err(); err != nil {
		return warn(ReasonRequestEnded, requestEnded(err))
	}
	patch, err := patchFor(pod.shape(), m)
	if err != nil {
		return warn("patch failed", err)
	}
	return m, patch
}

// ReasonRequestEnded: the admission request's context ended (the API server
// gave up on the call) before istio-aux answered.
const ReasonRequestEnded = "request ended"

func requestEnded(err error) error {
	return fmt.Errorf("the admission request ended before istio-aux answered: %w", err)
}
