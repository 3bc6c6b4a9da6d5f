package webhook

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// What is not an AdmissionReview the webhook can answer gets an HTTP error
// (a failed call: the API server then refuses the pod, failurePolicy Fail),
// counted as invalid when it got as far as being read.
func TestHandlerRefuses(t *testing.T) {
	valid := reviewBody(t, podRequest(t, "ml", nil, nil))
	tests := map[string]struct {
		method, contentType string
		body                []byte
		declared            int64 // Content-Length, when not the body's
		want                int
		invalid             bool
	}{
		"GET":                 {method: http.MethodGet, contentType: "application/json", want: http.StatusMethodNotAllowed},
		"not JSON":            {method: http.MethodPost, contentType: "text/plain", body: valid, want: http.StatusUnsupportedMediaType},
		"declared too large":  {method: http.MethodPost, contentType: "application/json", body: valid, declared: MaxReviewBytes + 1, want: http.StatusRequestEntityTooLarge, invalid: true},
		"undeclared too long": {method: http.MethodPost, contentType: "application/json", body: bytes.Repeat([]byte(" "), MaxReviewBytes+1), declared: -1, want: http.StatusRequestEntityTooLarge, invalid: true},
		"not a review":        {method: http.MethodPost, contentType: "application/json", body: []byte(`{"request":`), want: http.StatusBadRequest, invalid: true},
		"a review's object not JSON": {
			method: http.MethodPost, contentType: "application/json",
			body: bytes.Replace(valid, []byte(`"object":{`), []byte(`"object":{"metadata":`), 1), want: http.StatusBadRequest, invalid: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
			hr := httptest.NewRequest(tc.method, admission.Path, bytes.NewReader(tc.body))
			hr.Header.Set("Content-Type", tc.contentType)
			if tc.declared != 0 {
				hr.ContentLength = tc.declared
			}
			rec := httptest.NewRecorder()
			f.handler().ServeHTTP(rec, hr)
			if rec.Code != tc.want {
				t.Errorf("status %d (%s), want %d", rec.Code, strings.TrimSpace(rec.Body.String()), tc.want)
			}
			if got := f.counts(t); (got[admission.Invalid] == 1) != tc.invalid || len(got) > 1 {
				t.Errorf("counts %v, invalid counted: want %v", got, tc.invalid)
			}
		})
	}
}

// The API server says how long it waits (?timeout=); the admission's
// context ends then, within the longest timeout the API allows.
func TestReviewTimeout(t *testing.T) {
	for query, want := range map[string]time.Duration{
		"?timeout=5s":  5 * time.Second,
		"?timeout=2m":  maxReviewTimeout,
		"?timeout=x":   0,
		"?timeout=-1s": 0,
		"":             0,
	} {
		r := httptest.NewRequest(http.MethodPost, admission.Path+query, nil)
		ctx, cancel := withReviewTimeout(r)
		deadline, ok := ctx.Deadline()
		cancel()
		if ok != (want > 0) || (ok && (time.Until(deadline) > want || time.Until(deadline) < want-time.Second)) {
			t.Errorf("%q: deadline in %v (set %v), want %v", query, time.Until(deadline).Round(time.Second), ok, want)
		}
	}
}

// Until the informers Admit reads have synced, a review waits (as with
// knative's webhook), and gives up when its request does.
func TestHandlerWaitsForSync(t *testing.T) {
	f := newFixture(t, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	synced := make(chan struct{})
	h := newHandler(f.r.Review, synced, f.r.metrics)
	body := reviewBody(t, podRequest(t, "ml", nil, nil))
	post := func(ctx context.Context) *httptest.ResponseRecorder {
		hr := httptest.NewRequestWithContext(ctx, http.MethodPost, admission.Path, bytes.NewReader(body))
		hr.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, hr)
		return rec
	}
	ctx, cancel := context.WithTimeout(f.ctx, 50*time.Millisecond)
	defer cancel()
	if rec := post(ctx); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("before the sync: status %d, want 503", rec.Code)
	}
	close(synced)
	if rec := post(f.ctx); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"patch"`) {
		t.Errorf("after the sync: status %d, %s", rec.Code, rec.Body)
	}
}
