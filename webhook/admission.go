package webhook

import (
	"context"

	"go.uber.org/zap"
	admissionv1 "k8s.io/api/admission/v1"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/webhook/admission"
)

// Review answers one AdmissionReview, body, with the review to send back:
// the webhook's work on a request, HTTP aside (handler.go). An error means
// body is not an AdmissionReview; there is no one to answer then.
func (r *reconciler) Review(ctx context.Context, body []byte) ([]byte, error) {
	rv, err := admission.DecodeReview(body)
	if err != nil {
		r.metrics.record(admission.Invalid, admission.ReasonNotAReview)
		return nil, err
	}
	return rv.Respond(r.Admit(ctx, rv.Request))
}

// Admit answers one admission request (admission.Admit, in the configured
// mode), counts its outcome and logs it.
func (r *reconciler) Admit(ctx context.Context, req *admission.Request) *admissionv1.AdmissionResponse {
	m, resp := admission.Admit(ctx, req, r.namespaces, r.mode())
	r.metrics.record(m.Outcome, m.Reason)

	// Checked before the fields are built: With or a sugared call would
	// encode or box them whether or not a line is written (at the shipped
	// warn level none is, for most admissions).
	logger := logging.FromContext(ctx).Desugar()
	switch m.Outcome {
	case admission.Mutated:
		if ce := logger.Check(zap.DebugLevel, "Mutated pod"); ce != nil {
			ce.Write(zap.String("outcome", string(m.Outcome)), zap.String("reason", m.Reason), zap.String("annotation", m.Key), zap.Bool("labelled", m.Label))
		}
	case admission.Warned:
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

func (r *reconciler) mode() admission.Mode { return r.config.Load().Mode }
