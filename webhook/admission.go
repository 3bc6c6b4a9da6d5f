package webhook

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/logging"
)

var podKind = metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "Pod"}

// Review answers one AdmissionReview, body, with the review to send back:
// the webhook's work on a request, HTTP aside (handler.go). An error means
// body is not an AdmissionReview; there is no one to answer then.
func (r *reconciler) Review(ctx context.Context, body []byte) ([]byte, error) {
	rv, err := decodeReview(body)
	if err != nil {
		r.metrics.record(Invalid, ReasonNotAReview)
		return nil, err
	}
	return encodeResponse(rv, r.Admit(ctx, rv.Request))
}

// Admit answers one admission request. It always allows: a webhook that
// sits in front of every opted-in pod must never be the reason a Job cannot
// start. What it cannot handle it lets through unchanged, with an admission
// warning for the client and a log line for the operator.
func (r *reconciler) Admit(ctx context.Context, req *request) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{Allowed: true}
	if req != nil {
		resp.UID = req.UID
	}
	m, patch := r.admit(ctx, req)
	r.metrics.record(m.Outcome, m.Reason)

	// Checked before the fields are built: With or a sugared call would
	// encode or box them whether or not a line is written (at the shipped
	// warn level none is, for most admissions).
	logger := logging.FromContext(ctx).Desugar()
	if patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
	}
	switch m.Outcome {
	case Mutated:
		if ce := logger.Check(zap.DebugLevel, "Mutated pod"); ce != nil {
			ce.Write(zap.String("outcome", string(m.Outcome)), zap.String("reason", m.Reason), zap.String("annotation", m.Key), zap.Bool("labelled", m.Label))
		}
	case Warned:
		resp.Warnings = []string{m.Warning}
		if ce := logger.Check(zap.WarnLevel, "Let the request through unchanged"); ce != nil {
			ce.Write(zap.String("outcome", string(m.Outcome)), zap.String("reason", m.Reason), zap.String("warning", m.Warning))
		}
	default:
		if ce := logger.Check(zap.DebugLevel, "Skipped pod"); ce != nil {
			ce.Write(zap.String("outcome", string(m.Outcome)), zap.String("reason", m.Reason), zap.Bool("labelled", m.Label))
		}
	}
	return resp
}

// admit returns the mutation for a request and, when it mutates, its patch.
func (r *reconciler) admit(ctx context.Context, req *request) (Mutation, []byte) {
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
	labels, err := r.namespaces.Labels(ctx, namespace)
	if err != nil {
		return warn("namespace unreadable", err)
	}
	m := Mutate(pod, labels, r.mode())
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

func (r *reconciler) mode() Mode { return r.config.Load().Mode }

// ReasonRequestEnded: the admission request's context ended (the API server
// gave up on the call) before istio-aux answered.
const ReasonRequestEnded = "request ended"

func requestEnded(err error) error {
	return fmt.Errorf("the admission request ended before istio-aux answered: %w", err)
}
