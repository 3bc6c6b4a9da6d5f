package proxyquit

import (
	"context"
	"errors"
	"net/http"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// TestReviewsMustNameTheAudience: the API server honours a token for the
// audiences its review names (status.audiences: those of the review's that
// the token has). A review that names none of the function's, none at all
// (the API server's own audience: a reviewer that is not audience-aware)
// or only others, refuses the caller, as Kubernetes' own authenticators
// judge a review. Through the function as NewFromConfig wires it.
func TestReviewsMustNameTheAudience(t *testing.T) {
	for name, tc := range map[string]struct {
		audiences []string
		code      int
		body      Outcome
	}{
		"the function's audience":        {[]string{DefaultAudience}, 200, OutcomeGone},
		"no audience (the API server's)": {nil, 401, OutcomeUnauthenticated},
		"only the API server's audience": {[]string{"https://kubernetes.default.svc.cluster.local"}, 401, OutcomeUnauthenticated},
		"another audience":               {[]string{"istio-aux-other"}, 401, OutcomeUnauthenticated},
		"another, then the function's":   {[]string{"istio-aux-other", DefaultAudience}, 200, OutcomeGone},
	} {
		t.Run(name, func(t *testing.T) {
			api := newFakeAPIServer(t, true, func(_ *http.Request, _ authenticationv1.TokenReviewSpec) authenticationv1.TokenReviewStatus {
				return authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: tc.audiences,
					User: authenticationv1.UserInfo{Username: dispatcherUser}}
			})
			_, h := api.function(t)
			if code, body := deliver(context.Background(), t, h, dispatcherToken); code != tc.code || body != string(tc.body) {
				t.Errorf("%d %q, want %d %q", code, body, tc.code, tc.body)
			}
			if n := api.reviews.Load(); n != 1 {
				t.Errorf("%d TokenReviews, want 1", n)
			}
		})
	}
}

// TestJudgeReview: what a review's status says of a token asked about for
// the function's audience.
func TestJudgeReview(t *testing.T) {
	ours := []string{DefaultAudience}
	dispatcher := authenticationv1.UserInfo{Username: dispatcherUser}
	for name, tc := range map[string]struct {
		status authenticationv1.TokenReviewStatus
		user   string // "": refused
	}{
		"honoured for the audience":      {authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: ours, User: dispatcher}, dispatcherUser},
		"not authenticated":              {authenticationv1.TokenReviewStatus{Audiences: ours, User: dispatcher}, ""},
		"an error beside authenticated":  {authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: ours, User: dispatcher, Error: "pod not found"}, ""},
		"no audiences: the API server's": {authenticationv1.TokenReviewStatus{Authenticated: true, User: dispatcher}, ""},
		"another audience":               {authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"vault"}, User: dispatcher}, ""},
		"no user":                        {authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: ours}, ""},
	} {
		user, err := judgeReview(tc.status, ours)
		if user != tc.user || (err == nil) != (tc.user != "") || (err != nil && !errors.Is(err, ErrUnauthenticated)) {
			t.Errorf("%s: %q, %v; want %q", name, user, err, tc.user)
		}
	}
}
