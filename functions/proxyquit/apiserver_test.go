package proxyquit

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"knative.dev/pkg/logging"
)

// fakeAPIServer is a kube-apiserver as far as caller authentication goes:
// issuer discovery (when discovery is set) and TokenReviews, answered by
// review; every other path is 404, so that a caller let in finds its pod
// gone (200 gone). The function under test is wired to it as in a cluster
// (NewFromConfig), through real HTTP clients and their rate limits.
type fakeAPIServer struct {
	url       string
	reviews   atomic.Int64 // TokenReviews received
	review    func(r *http.Request, spec authenticationv1.TokenReviewSpec) authenticationv1.TokenReviewStatus
	discovery bool
}

func newFakeAPIServer(t *testing.T, discovery bool, review func(*http.Request, authenticationv1.TokenReviewSpec) authenticationv1.TokenReviewStatus) *fakeAPIServer {
	t.Helper()
	s := &fakeAPIServer{review: review, discovery: discovery}
	issuer, keys, _ := testKeys{}.Discover(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case s.discovery && r.URL.Path == openIDConfigPath:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"issuer": issuer, "jwks_uri": issuer + jwksPath})
		case s.discovery && r.URL.Path == jwksPath:
			w.Header().Set("Content-Type", "application/jwk-set+json")
			_ = json.NewEncoder(w).Encode(keys)
		case r.Method == http.MethodPost && r.URL.Path == "/apis/authentication.k8s.io/v1/tokenreviews":
			s.reviews.Add(1)
			var tr authenticationv1.TokenReview
			if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			tr.Status = s.review(r, tr.Spec)
			if r.Context().Err() != nil {
				return // the client gave up
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(&tr)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound,
				Message: strings.TrimPrefix(r.URL.Path, "/") + " not found"})
		}
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// function serves a Function built by NewFromConfig against the fake API
// server, until the test ends.
func (s *fakeAPIServer) function(t *testing.T) (*Function, http.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ctx = logging.WithLogger(ctx, zap.NewNop().Sugar())
	fn, err := NewFromConfig(ctx, &rest.Config{Host: s.url}, DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		fn.Close(ctx)
	})
	return fn, fn.HTTPHandler(ctx, prometheus.NewRegistry())
}

// accept answers a review as kube-apiserver does for a token it honours
// for the audiences asked for.
func accept(_ *http.Request, spec authenticationv1.TokenReviewSpec) authenticationv1.TokenReviewStatus {
	return authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: spec.Audiences,
		User: authenticationv1.UserInfo{Username: dispatcherUser}}
}

// deliver posts the done pod's event with token to h in process, with ctx,
// and returns the status and body.
func deliver(ctx context.Context, t *testing.T, h http.Handler, token string) (int, string) {
	t.Helper()
	e := newEvent(t, donePod("job-1", "uid-1"))
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", strings.NewReader(string(e.Data())))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range map[string]string{"ce-specversion": "1.0", "ce-type": e.Type(), "ce-id": e.ID(), "ce-source": e.Source(), "ce-subject": e.Subject()} {
		req.Header.Set(k, v)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, strings.TrimSpace(w.Body.String())
}
