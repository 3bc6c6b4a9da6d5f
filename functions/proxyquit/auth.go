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

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	"k8s.io/client-go/util/flowcontrol"
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
// caller, is then reviewed (TokenReview, review.go), to learn whether the
// API server still honours it: a bound token whose pod was deleted, or
// whose ServiceAccount was deleted or re-created, is revoked before it
// expires. Until the keys are read, a token whose claims pass is reviewed
// within a small budget only (review.go). Reviews run on their own
// client and rate limit, so no caller can spend the budget of the pod
// reads, the execs and the Events.

// Errors of Authenticate, mapped to HTTP statuses by the handler; any other
// is 503 (the caller retries).
var (
	// ErrUnauthenticated: no bearer token, or one that is not a valid
	// token of this cluster for the audience (401).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: a valid token of a caller that is not allowed (403).
	ErrForbidden = errors.New("caller not allowed")
	// errReviewDeferred: a token that needs a review the budget of
	// unverified reviews has no room for (503).
	errReviewDeferred = errors.New("the cluster's token keys are not read yet, and the reviews of tokens they would verify are spent")
)

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
	auth   Auth
	review Reviewer
	keys   *issuerKeys
	now    func() time.Time
	// unverified is the budget of reviews of tokens whose signature could
	// not be checked (no keys yet).
	unverified flowcontrol.PassiveRateLimiter
	flights    singleflight.Group
	reviews    *prometheus.CounterVec // Metrics.tokenReviews
	// refusals keeps the log of refused callers short (http.go).
	refusals *refusalLog

	mu      sync.Mutex
	entries map[[32]byte]tokenEntry
}

// newAuthenticator checks callers against a, reviewing tokens with r (nil:
// a token that needs a review is answered 503) and counting the reviews in
// m (nil: counted nowhere).
func newAuthenticator(a Auth, r Reviewer, m *Metrics) *authenticator {
	if m == nil {
		m, _ = NewMetrics(nil) // cannot fail without a registry
	}
	au := &authenticator{auth: a, review: r, keys: &issuerKeys{}, now: time.Now, entries: map[[32]byte]tokenEntry{},
		reviews: m.tokenReviews}
	au.unverified = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(unverifiedReviewsPerSecond, unverifiedReviewsBurst, authClock{au})
	au.refusals = &refusalLog{now: func() time.Time { return au.now() }, seen: map[string]*refusalCount{}}
	return au
}

// authClock is the authenticator's now (which tests set) as a clock.
type authClock struct{ a *authenticator }

func (c authClock) Now() time.Time                  { return c.a.now() }
func (c authClock) Since(t time.Time) time.Duration { return c.a.now().Sub(t) }

// Authenticate returns the caller of r, or ErrUnauthenticated,
// ErrForbidden or an error of the review itself. A refused caller is named
// only when it is known for sure (the cluster's keys verified its token, or
// a review named it), else "": a token's subject alone is its sender's to
// choose.
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
	claims, verified, err := a.check(token, now)
	if err != nil {
		if !verified {
			return "", err
		}
		return claims.Subject, err
	}
	key := sha256.Sum256([]byte(token))
	e, fresh, vouched := a.lookup(key, now)
	if !fresh {
		// A token neither signed by the keys nor honoured before comes out
		// of the budget of unverified reviews.
		budgeted := !verified && !vouched
		if e, err = a.reviewShared(ctx, key, token, claims, now, budgeted); err != nil {
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

func allowed(callers []string, user string) bool {
	return slices.ContainsFunc(callers, func(c string) bool {
		if p, ok := strings.CutSuffix(c, "*"); ok {
			return strings.HasPrefix(user, p)
		}
		return c == user
	})
}
