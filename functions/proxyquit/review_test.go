package proxyquit

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

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

// TestEachRequestKeepsItsOwnDeadline: requests with one token share its
// review, not their contexts. The first caller giving up does not fail
// the others' review, and a caller with a short deadline stops waiting at
// it, while the review goes on for the rest.
func TestEachRequestKeepsItsOwnDeadline(t *testing.T) {
	release := make(chan struct{})
	api := newFakeAPIServer(t, true, func(r *http.Request, spec authenticationv1.TokenReviewSpec) authenticationv1.TokenReviewStatus {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return accept(r, spec)
	})
	_, h := api.function(t)
	type answer struct {
		code int
		body string
		took time.Duration
	}
	start := func(ctx context.Context) <-chan answer {
		c := make(chan answer, 1)
		go func() {
			began := time.Now()
			code, body := deliver(ctx, t, h, dispatcherToken)
			c <- answer{code, body, time.Since(began)}
		}()
		return c
	}
	first, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	firstAnswer := start(first)
	for deadline := time.Now().Add(10 * time.Second); api.reviews.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first request's token was never reviewed")
		}
		time.Sleep(time.Millisecond) // polling, with a deadline
	}
	second := start(context.Background())
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	select {
	case a := <-start(short):
		if a.code != http.StatusServiceUnavailable || a.took > 2*time.Second {
			t.Errorf("a request with a 200 ms deadline: %d %q after %v, want 503 at its deadline", a.code, a.body, a.took)
		}
		t.Logf("a request with a 200 ms deadline, its token's review under way: %d after %v", a.code, a.took.Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Error("a request with a 200 ms deadline still waits for the review after 5 s")
	}
	giveUp()
	select {
	case a := <-firstAnswer:
		if a.code != http.StatusServiceUnavailable {
			t.Errorf("the request that gave up: %d %q, want 503", a.code, a.body)
		}
	case <-time.After(5 * time.Second):
		t.Error("the request that gave up still waits after 5 s")
	}
	close(release)
	select {
	case a := <-second:
		if a.code != http.StatusOK || a.body != string(OutcomeGone) {
			t.Errorf("the request that waited: %d %q, want 200 %q (its review not cancelled by another caller)", a.code, a.body, OutcomeGone)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request that waited got no answer")
	}
	if n := api.reviews.Load(); n != 1 {
		t.Errorf("%d TokenReviews for one token, want 1 (shared)", n)
	}
}

// TestNoReviewStormBeforeTheKeys: until the cluster's keys are read (a
// cold start, issuer discovery failing) a forged token's signature cannot
// be checked; forging one per request must not buy a TokenReview each.
func TestNoReviewStormBeforeTheKeys(t *testing.T) {
	h := newHarness(t, DefaultConfig(), optedIn, donePod("job-1", "uid-1"))
	h.fn.auth.keys = &issuerKeys{}
	now := time.Now()
	h.fn.auth.now = func() time.Time { return now }
	url := serve(t, h)
	h.client.ClearActions()
	reviews := func() int { return apiCalls(h, "create", "tokenreviews") }
	// Every claim the dispatcher's, signed by another key: nothing tells
	// them from its token without the keys.
	forge := func(n int) map[int]int {
		codes := map[int]int{}
		for i := range n {
			code, _ := post(t, url, "Bearer "+signToken(tokenSpec{key: otherKey, expires: now.Add(time.Hour + time.Duration(i)*time.Second)}), h)
			codes[code]++
		}
		return codes
	}
	codes := forge(300)
	if n := reviews(); n > unverifiedReviewsBurst {
		t.Errorf("300 forged tokens before the keys cost %d TokenReviews, want at most %d", n, unverifiedReviewsBurst)
	}
	// Reviewed and refused (401), or not reviewed: 503, retried.
	if codes[401] != reviews() || codes[503] != 300-reviews() {
		t.Errorf("300 forged tokens answered %v after %d reviews, want 401 for each reviewed, 503 for the rest", codes, reviews())
	}
	t.Logf("300 forged tokens: %d TokenReviews, answers %v", reviews(), codes)
	if n := counterValue(h.metrics.tokenReviews.WithLabelValues(reviewDeferred)); n != float64(codes[503]) {
		t.Errorf("deferred reviews counted %v, want %d", n, codes[503])
	}

	// The dispatcher, its share of the budget spent by forgers, is asked
	// to retry, and gets in as the budget refills.
	if code, _ := post(t, url, "Bearer "+dispatcherToken, h); code != 503 {
		t.Errorf("the dispatcher, the budget spent: %d, want 503", code)
	}
	now = now.Add(time.Second / unverifiedReviewsPerSecond)
	if code, _ := post(t, url, "Bearer "+dispatcherToken, h); code != 200 {
		t.Errorf("the dispatcher, the budget refilled: %d, want 200", code)
	}
	// Once honoured, its token is reviewed again outside the budget: the
	// forgers, still at it, cannot keep it out.
	for range 3 {
		now = now.Add(reviewTTL)
		forge(20)
		before := reviews()
		if code, _ := post(t, url, "Bearer "+dispatcherToken, h); code != 200 || reviews() != before+1 {
			t.Errorf("the dispatcher among forgers, reviewTTL later: %d after %d reviews, want 200 after one", code, reviews()-before)
		}
	}
	// The keys read: forged tokens cost nothing again.
	issuer, keys, _ := testKeys{}.Discover(context.Background())
	h.fn.auth.keys.set(issuer, keys)
	before := reviews()
	if codes := forge(50); codes[401] != 50 || reviews() != before {
		t.Errorf("with the keys, 50 forged tokens: %v after %d reviews, want 401 each, no review", codes, reviews()-before)
	}
}

// TestCacheKeepsTheVouchedWhenFull: forgers can fill the review cache
// with refused tokens; a token the API server honoured for an allowed
// caller stays, so that it keeps skipping the budget.
func TestCacheKeepsTheVouchedWhenFull(t *testing.T) {
	a := newAuthenticator(DefaultConfig().Auth, nil, nil)
	now := time.Now()
	a.now = func() time.Time { return now }
	dispatcher := [32]byte{1}
	a.store(dispatcher, tokenEntry{user: dispatcherUser, until: now.Add(reviewTTL), vouched: now.Add(time.Hour)})
	for i := range 3 * maxTokenEntries {
		a.store([32]byte{2, byte(i), byte(i >> 8)}, tokenEntry{refused: ErrUnauthenticated, until: now.Add(reviewTTL)})
	}
	now = now.Add(reviewTTL)
	if e, fresh, vouched := a.lookup(dispatcher, now); !vouched || fresh || e.user != dispatcherUser {
		t.Errorf("the dispatcher's entry after %d forged ones: %+v, fresh %v, vouched %v; want vouched", 3*maxTokenEntries, e, fresh, vouched)
	}
	if len(a.entries) > maxTokenEntries {
		t.Errorf("%d entries, want at most %d", len(a.entries), maxTokenEntries)
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
