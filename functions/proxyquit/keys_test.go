package proxyquit

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/istio-aux/istio-aux/internal/kube"
)

// issuerServer serves service account issuer discovery as kube-apiserver
// does: each path only to a client that accepts its media type (go-restful
// answers 406 otherwise).
func issuerServer(t *testing.T) *httptest.Server {
	t.Helper()
	issuer, keys, _ := testKeys{}.Discover(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accept := r.Header.Get("Accept")
		switch {
		case r.URL.Path == openIDConfigPath && strings.Contains(accept, "application/json"):
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"issuer": issuer, "jwks_uri": issuer + jwksPath})
		case r.URL.Path == jwksPath && strings.Contains(accept, "application/jwk-set+json"):
			w.Header().Set("Content-Type", "application/jwk-set+json")
			_ = json.NewEncoder(w).Encode(keys)
		case r.URL.Path == openIDConfigPath, r.URL.Path == jwksPath:
			http.Error(w, "406: Not Acceptable", http.StatusNotAcceptable)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestKeysFromTheAPIServer reads issuer discovery through internal/kube's
// client (protobuf by default) and verifies a token with what it read.
func TestKeysFromTheAPIServer(t *testing.T) {
	kc, err := kube.NewForConfig(&rest.Config{Host: issuerServer(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	var keys issuerKeys
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go keys.follow(ctx, APIServerIssuer(kc.RESTClient()))
	deadline := time.Now().Add(5 * time.Second)
	for {
		if set, issuer := keys.current(); set != nil {
			if issuer != testIssuer || len(set.Keys) != 1 || set.Keys[0].KeyID != "cluster-key" {
				t.Fatalf("read issuer %q, keys %+v", issuer, set.Keys)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the keys were never read")
		}
		time.Sleep(10 * time.Millisecond) // polling, with a deadline
	}
	a := newAuthenticator(DefaultConfig().Auth, nil, nil)
	a.keys = &keys
	if _, verified, err := a.check(dispatcherToken, time.Now()); err != nil || !verified {
		t.Errorf("the dispatcher's token against the read keys: verified %v, %v", verified, err)
	}
	if _, _, err := a.check(signToken(tokenSpec{key: otherKey}), time.Now()); err == nil {
		t.Error("a token signed by another key passed")
	}
}

// TestNoKeysWithoutDiscovery: a cluster that does not serve issuer
// discovery leaves the keys unset (every plausible token is reviewed).
func TestNoKeysWithoutDiscovery(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	kc, err := kube.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := APIServerIssuer(kc.RESTClient()).Discover(context.Background()); err == nil {
		t.Error("Discover succeeded against a server without issuer discovery")
	}
}
