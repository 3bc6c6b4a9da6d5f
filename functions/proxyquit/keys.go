package proxyquit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
	"knative.dev/pkg/logging"
)

// Issuer is where the cluster publishes its ServiceAccount token issuer and
// the public keys that sign the tokens (service account issuer discovery).
type Issuer interface {
	Discover(ctx context.Context) (issuer string, keys jose.JSONWebKeySet, err error)
}

// keysRefresh is how often the keys are read again, on a timer and never
// because of a request: no caller can make the function call the API
// server. A token signed with a key newer than the last read (the API
// server's signing key rotated) is refused until the next read; the
// dispatcher retries it.
const keysRefresh = time.Minute

// issuerKeys are the last keys read, or none (the cluster does not publish
// them, or they were not read yet): then every token that passes the other
// checks is reviewed.
type issuerKeys struct {
	mu     sync.RWMutex
	issuer string
	keys   *jose.JSONWebKeySet
}

func (k *issuerKeys) current() (*jose.JSONWebKeySet, string) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.keys, k.issuer
}

func (k *issuerKeys) set(issuer string, keys jose.JSONWebKeySet) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.issuer, k.keys = issuer, &keys
}

// follow reads the keys from iss now and every keysRefresh until ctx is
// done. A failed read keeps the keys read before.
func (k *issuerKeys) follow(ctx context.Context, iss Issuer) {
	logger := logging.FromContext(ctx)
	failing := false
	for {
		rctx, cancel := context.WithTimeout(ctx, apiTimeout)
		issuer, keys, err := iss.Discover(rctx)
		cancel()
		switch {
		case err == nil:
			k.set(issuer, keys)
			if failing {
				logger.Infow("Reading the cluster's token keys again", zap.String("issuer", issuer))
			}
			failing = false
		case !failing && ctx.Err() == nil:
			failing = true
			logger.Warnw("Cannot read the cluster's token keys (service account issuer discovery); "+
				"every token that passes the other checks is reviewed instead", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(keysRefresh):
		}
	}
}

// Where the API server serves service account issuer discovery; the
// default RBAC lets every ServiceAccount read both
// (system:service-account-issuer-discovery).
const (
	openIDConfigPath = "/.well-known/openid-configuration"
	jwksPath         = "/openid/v1/jwks"
)

// APIServerIssuer reads issuer discovery from the API server c talks to.
func APIServerIssuer(c rest.Interface) Issuer { return apiServerIssuer{c} }

type apiServerIssuer struct{ c rest.Interface }

func (a apiServerIssuer) Discover(ctx context.Context) (string, jose.JSONWebKeySet, error) {
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if err := a.get(ctx, openIDConfigPath, "application/json", &doc); err != nil {
		return "", jose.JSONWebKeySet{}, err
	}
	var keys jose.JSONWebKeySet
	if err := a.get(ctx, jwksPath, "application/jwk-set+json", &keys); err != nil {
		return "", keys, err
	}
	if doc.Issuer == "" || len(keys.Keys) == 0 {
		return "", keys, errors.New("issuer discovery named no issuer or no key")
	}
	return doc.Issuer, keys, nil
}

// get reads path as JSON. The API server routes these paths by their
// media type: the client's default Accept (protobuf, JSON) would get 406.
func (a apiServerIssuer) get(ctx context.Context, path, accept string, into any) error {
	raw, err := a.c.Get().AbsPath(path).SetHeader("Accept", accept).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return nil
}
