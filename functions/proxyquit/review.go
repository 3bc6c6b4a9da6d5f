package proxyquit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// Reviewer asks the API server whether it honours a bearer token for
// audiences (an authentication.k8s.io/v1 TokenReview) and returns the
// review's status as the API server wrote it, for the authenticator to
// judge (judgeReview). An error means no answer (the API is unreachable).
type Reviewer interface {
	Review(ctx context.Context, token string, audiences []string) (authenticationv1.TokenReviewStatus, error)
}

// judgeReview is the caller a review's status names, or why it refuses the
// token. Authenticated alone is not enough: a review's status.audiences are
// those of the audiences asked for that the token was honoured for, and a
// review that names none of the function's (none at all: the token is good
// for the API server's own audience, or the reviewer ignores audiences)
// refuses it, as Kubernetes' own authenticators judge a review.
func judgeReview(st authenticationv1.TokenReviewStatus, audiences []string) (string, error) {
	switch {
	case !st.Authenticated || st.Error != "":
		return "", fmt.Errorf("%w: the API server does not honour the token (revoked?): %s", ErrUnauthenticated, st.Error)
	case !slices.ContainsFunc(st.Audiences, func(a string) bool { return slices.Contains(audiences, a) }):
		return "", fmt.Errorf("%w: the API server honours the token for %q, not for %q", ErrUnauthenticated, st.Audiences, audiences)
	case st.User.Username == "":
		return "", fmt.Errorf("%w: the review names no user", ErrUnauthenticated)
	}
	return st.User.Username, nil
}

// The budget of reviews of tokens whose signature could not be checked:
// before the cluster's keys are first read (a cold start, issuer discovery
// failing or not served). Any pod can forge a token whose claims pass (the
// dispatcher's subject, the function's audience, a future expiry), and
// without the keys nothing tells it from the dispatcher's but a review:
// one per forged token would let anyone spend the authentication client's
// rate limit, which the keys' own reads share. Refusing every token until
// the keys are read would instead stop every quit on a cluster that does
// not publish its keys, and for a minute after a start whose first read
// failed. So such reviews are bounded: a few at once, then one a second; a
// token beyond the budget is answered 503 without a review (the dispatcher
// retries it). A token the API server honoured before, of an allowed caller
// (the dispatcher's, which it presents for an hour), is reviewed again
// outside the budget: no forger can make one, so once the dispatcher got
// in, forgers cannot keep it out.
const (
	unverifiedReviewsPerSecond = 1
	unverifiedReviewsBurst     = 5
)

// reviewTimeout bounds a review, which no request's context bounds.
const reviewTimeout = apiTimeout

// tokenEntry is what the reviews of one token said.
type tokenEntry struct {
	user    string
	refused error     // why the review refused the token, or nil
	until   time.Time // the review's answer stands until then
	// vouched: the API server honoured this token of an allowed caller;
	// until its expiry it is reviewed again outside the budget.
	vouched time.Time
}

// reviewShared reviews token once for all the requests that present it
// meanwhile, and caches the answer; a budgeted review first takes its share
// of the unverified budget (errReviewDeferred when there is none). The
// review runs on a context of its own (the first caller's values, not its
// cancellation, and reviewTimeout): one caller giving up (its connection
// closed, its deadline passed) must not fail the review the others wait
// for. Each caller stops waiting at its own deadline; the review goes on,
// and its answer serves the next request.
func (a *authenticator) reviewShared(ctx context.Context, key [32]byte, token string, claims jwt.Claims, now time.Time, budgeted bool) (tokenEntry, error) {
	answer := a.flights.DoChan(string(key[:]), func() (any, error) {
		if a.review == nil {
			return tokenEntry{}, errors.New("no token reviewer")
		}
		if budgeted && !a.unverified.TryAccept() {
			a.reviews.WithLabelValues(reviewDeferred).Inc()
			return tokenEntry{}, errReviewDeferred
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		st, err := a.review.Review(rctx, token, a.auth.Audiences)
		if err != nil {
			a.reviews.WithLabelValues(reviewError).Inc()
			return tokenEntry{}, err
		}
		exp := claims.Expiry.Time()
		e := tokenEntry{until: now.Add(reviewTTL)}
		if exp.Before(e.until) {
			e.until = exp
		}
		e.user, e.refused = judgeReview(st, a.auth.Audiences)
		if e.refused != nil {
			a.reviews.WithLabelValues(reviewRefused).Inc()
		} else {
			a.reviews.WithLabelValues(reviewAccepted).Inc()
		}
		if e.refused == nil && allowed(a.auth.Callers, e.user) {
			e.vouched = exp
		}
		a.store(key, e)
		return e, nil
	})
	select {
	case r := <-answer:
		if errors.Is(r.Err, errReviewDeferred) {
			return tokenEntry{}, r.Err
		}
		if r.Err != nil {
			return tokenEntry{}, fmt.Errorf("reviewing the caller's token: %w", r.Err)
		}
		return r.Val.(tokenEntry), nil
	case <-ctx.Done():
		return tokenEntry{}, fmt.Errorf("waiting for the review of the caller's token: %w", context.Cause(ctx))
	}
}

// lookup is what the reviews of a token said: fresh while the last answer
// stands, vouched while the API server's having honoured it lets it skip
// the budget.
func (a *authenticator) lookup(key [32]byte, now time.Time) (e tokenEntry, fresh, vouched bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.entries[key]
	if !ok {
		return tokenEntry{}, false, false
	}
	return e, now.Before(e.until), now.Before(e.vouched)
}

// store keeps e, within maxTokenEntries: when full, what is neither fresh
// nor vouched goes first, then what is not vouched (forgers can fill the
// cache; only the allowed callers' tokens are vouched for), then the rest.
func (a *authenticator) store(key [32]byte, e tokenEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for _, keep := range []func(tokenEntry) bool{
		func(old tokenEntry) bool { return now.Before(old.until) || now.Before(old.vouched) },
		func(old tokenEntry) bool { return now.Before(old.vouched) },
	} {
		if len(a.entries) < maxTokenEntries {
			break
		}
		for k, old := range a.entries {
			if !keep(old) {
				delete(a.entries, k)
			}
		}
	}
	if len(a.entries) >= maxTokenEntries {
		clear(a.entries)
	}
	a.entries[key] = e
}

// APIServerReviewer reviews tokens with the API server c talks to (the
// caller needs create on tokenreviews). It returns the review's whole
// status: whether the token is honoured for the function's audience is the
// authenticator's to judge, from status.audiences (judgeReview).
func APIServerReviewer(c rest.Interface) Reviewer { return apiServerReviewer{c} }

type apiServerReviewer struct{ c rest.Interface }

func (a apiServerReviewer) Review(ctx context.Context, token string, audiences []string) (authenticationv1.TokenReviewStatus, error) {
	body, err := json.Marshal(&authenticationv1.TokenReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"},
		Spec:     authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences},
	})
	if err != nil {
		return authenticationv1.TokenReviewStatus{}, err
	}
	// Not core/v1 (the client's group): an absolute path, JSON both ways.
	raw, err := a.c.Post().AbsPath("/apis/authentication.k8s.io/v1/tokenreviews").
		SetHeader("Content-Type", "application/json").SetHeader("Accept", "application/json").
		Body(body).DoRaw(ctx)
	if err != nil {
		return authenticationv1.TokenReviewStatus{}, err
	}
	var review authenticationv1.TokenReview
	if err := json.Unmarshal(raw, &review); err != nil {
		return authenticationv1.TokenReviewStatus{}, fmt.Errorf("decoding the TokenReview: %w", err)
	}
	return review.Status, nil
}
