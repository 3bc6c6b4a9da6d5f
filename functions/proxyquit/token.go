package proxyquit

import (
	"fmt"
	"slices"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// signatureAlgorithms are those the API server signs ServiceAccount tokens
// with (RSA and ECDSA keys); anything else (none, HMAC) is refused unread.
var signatureAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512}

// notBeforeLeeway tolerates an API server clock a little ahead of this
// one. Expiry gets none: an expired token is refused on time.
const notBeforeLeeway = time.Minute

// check refuses, without an API call, what cannot be a token of this
// cluster for the function's audience from an allowed caller: not a signed
// JWT, expired or not yet valid, for another audience or from another
// issuer, not signed by the cluster's keys (when it publishes them), of a
// subject that may not call. What passes is a token of an allowed caller,
// whose signature was checked if the keys were at hand (verified). The
// claims are returned in every case (the subject names a refused caller in
// the log).
func (a *authenticator) check(token string, now time.Time) (c jwt.Claims, verified bool, err error) {
	tok, err := jwt.ParseSigned(token, signatureAlgorithms)
	if err != nil {
		return c, false, fmt.Errorf("%w: not a signed token: %w", ErrUnauthenticated, err)
	}
	// The claims are checked before the signature: reading them costs less
	// than verifying it, and a mismatch refuses the token either way.
	if err := tok.UnsafeClaimsWithoutVerification(&c); err != nil {
		return c, false, fmt.Errorf("%w: unreadable claims: %w", ErrUnauthenticated, err)
	}
	keys, issuer := a.keys.current()
	switch {
	case c.Expiry == nil:
		return c, false, fmt.Errorf("%w: the token never expires (not a bound ServiceAccount token)", ErrUnauthenticated)
	case !now.Before(c.Expiry.Time()):
		return c, false, fmt.Errorf("%w: the token expired at %v", ErrUnauthenticated, c.Expiry.Time().UTC())
	case c.NotBefore != nil && now.Add(notBeforeLeeway).Before(c.NotBefore.Time()):
		return c, false, fmt.Errorf("%w: the token is valid from %v", ErrUnauthenticated, c.NotBefore.Time().UTC())
	case !slices.ContainsFunc(a.auth.Audiences, c.Audience.Contains):
		return c, false, fmt.Errorf("%w: the token is for %v, not %v", ErrUnauthenticated, []string(c.Audience), a.auth.Audiences)
	case issuer != "" && c.Issuer != issuer:
		return c, false, fmt.Errorf("%w: the token is from issuer %q, not this cluster's", ErrUnauthenticated, c.Issuer)
	}
	if keys != nil {
		var signed jwt.Claims
		if err := tok.Claims(keys, &signed); err != nil {
			return c, false, fmt.Errorf("%w: the signature is not by this cluster's keys: %w", ErrUnauthenticated, err)
		}
	}
	// Without the keys this subject is unverified; refusing a forged one
	// with 403 rather than 401 tells its sender nothing.
	if !allowed(a.auth.Callers, c.Subject) {
		return c, keys != nil, fmt.Errorf("%w: %s", ErrForbidden, c.Subject)
	}
	return c, keys != nil, nil
}
