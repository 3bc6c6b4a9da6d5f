package admission

import (
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"
)

// Review is the part of an AdmissionReview (admission.k8s.io/v1, or v1beta1:
// the same shape) the webhook reads.
type Review struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Request    *Request `json:"request"`
}

// Request is the part of an AdmissionRequest the webhook reads, its object
// decoded in the same pass, only as far as Mutate reads it (Pod): one read
// of the review's bytes, no copy of the object.
type Request struct {
	requestHead
	Object *Pod `json:"object"`
	// objectErr says why Object could not be read (DecodeReview).
	objectErr error
}

// requestHead is the part of an AdmissionRequest beside its object.
type requestHead struct {
	UID         types.UID               `json:"uid"`
	Kind        metav1.GroupVersionKind `json:"kind"`
	SubResource string                  `json:"subResource"`
	Namespace   string                  `json:"namespace"`
	Operation   admissionv1.Operation   `json:"operation"`
}

// DecodeReview reads an AdmissionReview the way the API server writes JSON
// (field names case-sensitive). A review whose object Mutate cannot read (a
// field it reads has another type) is still a review: it is read again with
// the object left raw, and objectErr says what is wrong with the object. An
// error means body is not an AdmissionReview at all.
func DecodeReview(body []byte) (*Review, error) {
	var rv Review
	err := kjson.UnmarshalCaseSensitivePreserveInts(body, &rv)
	if err == nil {
		if rv.Request != nil && rv.Request.Object == nil {
			rv.Request.objectErr = errNoObject
		}
		return &rv, nil
	}
	// Only bad input comes this way: decoding twice more costs nothing
	// that matters.
	var raw struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Request    *struct {
			requestHead
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if rerr := kjson.UnmarshalCaseSensitivePreserveInts(body, &raw); rerr != nil || raw.Request == nil {
		return nil, fmt.Errorf("not an AdmissionReview: %w", err)
	}
	rv = Review{APIVersion: raw.APIVersion, Kind: raw.Kind, Request: &Request{requestHead: raw.Request.requestHead}}
	if _, perr := DecodePod(raw.Request.Object); perr != nil {
		rv.Request.objectErr = perr
	} else {
		// Read alone the object is a pod: what failed is in the review.
		return nil, fmt.Errorf("not an AdmissionReview: %w", err)
	}
	return &rv, nil //nolint:nilerr // the pod's own error travels in the request, to be answered as a refusal
}

// Respond is the AdmissionReview that answers rv with resp, in rv's
// apiVersion and kind (the API server requires the ones it sent).
func (rv *Review) Respond(resp *admissionv1.AdmissionResponse) ([]byte, error) {
	out := struct {
		APIVersion string                         `json:"apiVersion"`
		Kind       string                         `json:"kind"`
		Response   *admissionv1.AdmissionResponse `json:"response"`
	}{rv.APIVersion, rv.Kind, resp}
	b, err := json.Marshal(&out)
	if err != nil {
		return nil, fmt.Errorf("encoding the admission response: %w", err)
	}
	return b, nil
}
