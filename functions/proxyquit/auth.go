package proxyquit

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// Caller authentication. Anything in the cluster can reach the function's
// pods (a pod IP bypasses Knative's routing), and the function execs into
// proxies: only the dispatcher, and an ApiServerSource, may call it. They
// present a Kubernetes ServiceAccount token made for the function's
// audience (a projected token volume; Knative Eventing's OIDC tokens are the
// same kind).
//
// What cannot be such a token is refused before any API call (token.go):
// its shape, expiry, audience, issuer, and its signature against the keys
// the cluster publishes (service account issuer discovery, keys.go). Only a
// token signed by the cluster for the function's audience, of an allowed
// caller, is then reviewed (TokenReview), to learn whether the API server
// still honours it: a bound token whose pod was deleted, or whose
// ServiceAccount was deleted or re-created, is revoked before it expires.
// Reviews run on their own client and rate limit, so no caller can spend
// the budget of the pod reads, the execs and the Events.

// Errors of Authenticate, mapped to HTTP statuses by the handler.
var (
	// ErrUnauthenticated: no bearer token, or one that is not a valid
	// token of this cluster for the audience (401).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: a valid token of a caller that is not allowed (403).
	ErrForbidden = errors.New("caller not allowed")
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

// Auth configures caller authentication.
type Auth struct {
	// Disabled lets every caller in (ISTIO_AUX_AUTH=off): only for a
	// function that nothing but the local dispatcher can reach.
	Disabled bool
	// Audiences a caller's token must be made for.
	Audiences []string
	// Callers are the user names allowed to deliver events; an entry ending
	// in "*" allows every name with that prefix.
	Callers []string
}

// Defaults for Auth: the audience the bridge's and the dispatcher's
// projected tokens carry (config/500-bridge.yaml, config/dispatch/), and
// their ServiceAccounts.
const DefaultAudience = "istio-aux-proxyquit"

// DefaultCallers is the ServiceAccount istio-aux's dispatchers run as
// (config/500-bridge.yaml, config/dispatch/).
var DefaultCallers = []string{"system:serviceaccount:istio-aux:istio-aux-bridge"}

// Bounds of the review cache.
const (
	// reviewTTL is how long a review's answer is reused (never past the
	// token's expiry): how late a revoked token is noticed.
	reviewTTL       = 10 * time.Second
	maxTokenEntries = 1024
	maxTokenBytes   = 16 << 10
)

// authenticator checks callers against Auth. Tokens that pass the local
// checks are reviewed at most once per reviewTTL each.
type authenticator struct {
	auth    Auth
	review  Reviewer
	keys    *issuerKeys
	now     func() time.Time
	flights singleflight.Group

	mu      sync.Mutex
	entries map[[32]byte]tokenEntry
}

type tokenEntry struct {
	user    string
	refused error // why the review refused the token, or nil
	until   time.Time
}

// newAuthenticator checks callers against a, reviewing tokens with r (nil:
// a token that needs a review is answered 503).
func newAuthenticator(a Auth, r Reviewer) *authenticator {
	return &authenticator{auth: a, review: r, keys: &issuerKeys{}, now: time.Now, entries: map[[32]byte]tokenEntry{}}
}

// Authenticate returns the caller of r, or ErrUnauthenticated,
// ErrForbidden or an error of the review itself.
func (a *authenticator) Authenticate(ctx context.Context, r *http.Request) (string, error) {
	if a.auth.Disabled {
		return "", nil
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" || len(token) > maxTokenBytes {
		return "", fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	now := a.now()
	// Local checks first, on every request: a token expires on time
	// whatever its review said.
	claims, err := a.check(token, now)
	if err != nil {
		return claims.Subject, err
	}
	key := sha256.Sum256([]byte(token))
	e, cached := a.lookup(key, now)
	if !cached {
		if e, err = a.reviewShared(ctx, key, token, claims, now); err != nil {
			return "", err
		}
	}
	if e.refused != nil {
		return "", e.refused
	}
	if !allowed(a.auth.Callers, e.user) {
		return e.user, fmt.Errorf("%w: %s", ErrForbidden, e.user)
	}
	return e.user, nil
}

// reviewTimeout bounds a review, which no request's context bounds.
const reviewTimeout = apiTimeout

// reviewShared reviews token once for all the requests that present it
// meanwhile, and caches the answer. The review runs on a context of its
// own (the first caller's values, not its cancellation, and reviewTimeout):
// one caller giving up (its connection closed, its deadline passed) must
// not fail the review the others wait for. Each caller stops waiting at its
// own deadline; the review goes on, and its answer serves the next request.
func (a *authenticator) reviewShared(ctx context.Context, key [32]byte, token string, claims jwt.Claims, now time.Time) (tokenEntry, error) {
	answer := a.flights.DoChan(string(key[:]), func() (any, error) {
		if a.review == nil {
			return tokenEntry{}, errors.New("no token reviewer")
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		st, err := a.review.Review(rctx, token, a.auth.Audiences)
		if err != nil {
			return tokenEntry{}, err
		}
		until := now.Add(reviewTTL)
		if exp := claims.Expiry.Time(); exp.Before(until) {
			until = exp
		}
		e := tokenEntry{until: until}
		e.user, e.refused = judgeReview(st, a.auth.Audiences)
		a.store(key, e)
		return e, nil
	})
	select {
	case r := <-answer:
		if r.Err != nil {
			return tokenEntry{}, fmt.Errorf("reviewing the caller's token: %w", r.Err)
		}
		return r.Val.(tokenEntry), nil
	case <-ctx.Done():
		return tokenEntry{}, fmt.Errorf("waiting for the review of the caller's token: %w", context.Cause(ctx))
	}
}

func allowed(callers []string, user string) bool {
	return slices.ContainsFunc(callers, func(c string) bool {
		if p, ok := strings.CutSuffix(c, "*"); ok {
			return strings.HasPrefix(user, p)
		}
		return c == user
	})
}

func (a *authenticator) lookup(key [32]byte, now time.Time) (tokenEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.entries[key]
	if !ok || !now.Before(e.until) {
		return tokenEntry{}, false
	}
	return e, true
}

func (a *authenticator) store(key [32]byte, e tokenEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.entries) >= maxTokenEntries {
		now := a.now()
		for k, old := range a.entries {
			if !now.Before(old.until) {
				delete(a.entries, k)
			}
		}
		if len(a.entries) >= maxTokenEntries {
			clear(a.entries)
		}
	}
	a.entries[key] = e
}
