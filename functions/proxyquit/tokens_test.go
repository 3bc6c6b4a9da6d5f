package proxyquit

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// The tests' cluster: an issuer and its signing key, as kube-apiserver's
// --service-account-issuer and --service-account-signing-key-file.
const testIssuer = "https://kubernetes.default.svc.cluster.local"

var (
	clusterKey = mustKey()
	// otherKey signs tokens no one in this cluster issued.
	otherKey = mustKey()
)

func mustKey() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}

// testKeys is the tests' cluster's issuer discovery.
type testKeys struct{}

func (testKeys) Discover(context.Context) (string, jose.JSONWebKeySet, error) {
	return testIssuer, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &clusterKey.PublicKey, KeyID: "cluster-key", Algorithm: string(jose.RS256), Use: "sig"}}}, nil
}

// tokenSpec is what a test token claims; zero fields take the dispatcher's.
type tokenSpec struct {
	subject, issuer string
	audience        []string
	expires         time.Time
	key             *rsa.PrivateKey
	kid             string
}

// signToken makes a ServiceAccount token as the API server does (RS256,
// with the key id its JWKS names).
func signToken(s tokenSpec) string {
	if s.subject == "" {
		s.subject = dispatcherUser
	}
	if s.issuer == "" {
		s.issuer = testIssuer
	}
	if s.audience == nil {
		s.audience = []string{DefaultAudience}
	}
	if s.expires.IsZero() {
		s.expires = time.Now().Add(24 * time.Hour)
	}
	if s.key == nil {
		s.key = clusterKey
	}
	if s.kid == "" {
		s.kid = "cluster-key"
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: s.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", s.kid))
	if err != nil {
		panic(err)
	}
	token, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: s.issuer, Subject: s.subject,
		Audience: s.audience, Expiry: jwt.NewNumericDate(s.expires)}).Serialize()
	if err != nil {
		panic(err)
	}
	return token
}
