package natstoken_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/istio-aux/istio-aux/bridge/natstoken"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/internal/kube"
)

// fakeSecrets holds one Secret; race, when set, runs before an update is
// applied (another pod writing first).
type fakeSecrets struct {
	mu      sync.Mutex
	secret  *corev1.Secret
	updates int
	race    func(*corev1.Secret) bool
}

func (f *fakeSecrets) Get(_ context.Context, name string) (*corev1.Secret, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.secret == nil || f.secret.Name != name {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
	return f.secret.DeepCopy(), nil
}

func (f *fakeSecrets) Update(_ context.Context, s *corev1.Secret) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.race != nil && f.race(f.secret) {
		f.race = nil
		return apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, s.Name, errors.New("modified"))
	}
	f.updates++
	f.secret = s.DeepCopy()
	return nil
}

func TestEnsure(t *testing.T) {
	ctx := context.Background()
	empty := func() *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-nats", Namespace: "istio-aux"}}
	}
	t.Run("the shipped empty Secret gets a token", func(t *testing.T) {
		f := &fakeSecrets{secret: empty()}
		did, err := natstoken.Ensure(ctx, f, "istio-aux-nats")
		if err != nil || did != natstoken.Generated {
			t.Fatalf("Ensure = %q, %v", did, err)
		}
		token := string(f.secret.Data[transport.SecretToken])
		if len(token) != 43 {
			t.Errorf("token %q: want 256 bits in base64url (43 characters)", token)
		}
		// Again (the pod restarts): the token stays.
		if did, err := natstoken.Ensure(ctx, f, "istio-aux-nats"); err != nil || did != natstoken.Kept || string(f.secret.Data[transport.SecretToken]) != token {
			t.Errorf("second Ensure = %q, %v; token changed: %v", did, err, string(f.secret.Data[transport.SecretToken]) != token)
		}
	})
	t.Run("every generated token is one nats-server reads", func(t *testing.T) {
		// One in sixty random tokens is not (TestGeneratedTokensAreRead in
		// bridge/transport): 3,000 draws miss none of those only by chance
		// of e^-50.
		seen := map[string]bool{}
		for range 3000 {
			f := &fakeSecrets{secret: empty()}
			if _, err := natstoken.Ensure(ctx, f, "istio-aux-nats"); err != nil {
				t.Fatal(err)
			}
			token := string(f.secret.Data[transport.SecretToken])
			if err := natstoken.Readable(token); err != nil || len(token) != 43 || seen[token] {
				t.Fatalf("generated %q (%d characters, seen before %v): %v", token, len(token), seen[token], err)
			}
			seen[token] = true
		}
	})
	t.Run("a token nats-server cannot read is replaced", func(t *testing.T) {
		bad := "-RcGe5UBsBDEIcNfUNg-SKFGLCLxzfxyPPiWyHHBusE"
		f := &fakeSecrets{secret: empty()}
		f.secret.Data = map[string][]byte{transport.SecretToken: []byte(bad), "other": []byte("kept")}
		did, err := natstoken.Ensure(ctx, f, "istio-aux-nats")
		token := string(f.secret.Data[transport.SecretToken])
		if err != nil || did != natstoken.Replaced || token == bad || natstoken.Readable(token) != nil || string(f.secret.Data["other"]) != "kept" {
			t.Errorf("Ensure = %q, %v; token %q, other key %q", did, err, token, f.secret.Data["other"])
		}
	})
	t.Run("another pod wrote first", func(t *testing.T) {
		f := &fakeSecrets{secret: empty()}
		f.race = func(s *corev1.Secret) bool {
			s.Data = map[string][]byte{transport.SecretToken: []byte("theirs")}
			return true
		}
		did, err := natstoken.Ensure(ctx, f, "istio-aux-nats")
		if err != nil || did != natstoken.Kept || string(f.secret.Data[transport.SecretToken]) != "theirs" {
			t.Errorf("Ensure = %q, %v, token %q; want theirs kept", did, err, f.secret.Data[transport.SecretToken])
		}
	})
	t.Run("no Secret", func(t *testing.T) {
		if _, err := natstoken.Ensure(ctx, &fakeSecrets{}, "istio-aux-nats"); !apierrors.IsNotFound(errors.Unwrap(err)) {
			t.Errorf("Ensure without the Secret = %v, want a NotFound", err)
		}
	})
}

// TestRESTSecrets: the requests RESTSecrets makes, through internal/kube's
// client, are the Secrets API's.
func TestRESTSecrets(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	var put corev1.Secret
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		switch r.Method {
		case http.MethodGet:
			_ = json.NewEncoder(w).Encode(&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
				ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-nats", Namespace: "istio-aux", ResourceVersion: "7"}})
		case http.MethodPut:
			body, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(body, &put); err != nil {
				t.Errorf("PUT body: %v", err)
			}
			_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"istio-aux-nats"}}`))
		}
	}))
	defer srv.Close()
	kc, err := kube.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	did, err := natstoken.Ensure(context.Background(), natstoken.RESTSecrets(kc.RESTClient(), "istio-aux"), "istio-aux-nats")
	if err != nil || did != natstoken.Generated {
		t.Fatalf("Ensure = %q, %v", did, err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"GET /api/v1/namespaces/istio-aux/secrets/istio-aux-nats", "PUT /api/v1/namespaces/istio-aux/secrets/istio-aux-nats"}
	if len(seen) != 2 || seen[0] != want[0] || seen[1] != want[1] {
		t.Errorf("requests %v, want %v", seen, want)
	}
	if put.ResourceVersion != "7" || len(put.Data[transport.SecretToken]) == 0 {
		t.Errorf("PUT %+v: want the read resourceVersion and a token", put)
	}
}

func TestCopy(t *testing.T) {
	ctx := context.Background()
	t.Run("waits for the token, then writes every key", func(t *testing.T) {
		f := &fakeSecrets{secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-nats"}}}
		dir := t.TempDir()
		done := make(chan error, 1)
		go func() {
			n, err := natstoken.Copy(ctx, f, "istio-aux-nats", dir, 10*time.Millisecond)
			if err == nil && n != 2 {
				err = fmt.Errorf("copied %d keys, want 2", n)
			}
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("Copy returned before the Secret had data: %v", err)
		case <-time.After(100 * time.Millisecond): // ten polls of an empty Secret
		}
		if _, err := natstoken.Ensure(ctx, f, "istio-aux-nats"); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		f.secret.Data["ca.crt"] = []byte("CA")
		f.mu.Unlock()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		token, err := os.ReadFile(filepath.Join(dir, transport.SecretToken))
		if err != nil || string(token) != string(f.secret.Data[transport.SecretToken]) {
			t.Errorf("token file %q (%v), want the Secret's", token, err)
		}
		if info, err := os.Stat(filepath.Join(dir, "ca.crt")); err != nil || info.Mode().Perm() != 0o400 {
			t.Errorf("ca.crt: %v, %v", info, err)
		}
	})
	t.Run("no Secret: no credentials, nothing written", func(t *testing.T) {
		dir := t.TempDir()
		if n, err := natstoken.Copy(ctx, &fakeSecrets{}, "istio-aux-nats", dir, time.Millisecond); n != 0 || err != nil {
			t.Fatalf("Copy = %d, %v", n, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("wrote %d files", len(entries))
		}
	})
	t.Run("an empty Secret that stays empty ends with the context", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		f := &fakeSecrets{secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-nats"}}}
		if _, err := natstoken.Copy(ctx, f, "istio-aux-nats", t.TempDir(), 5*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Copy = %v, want the context's deadline", err)
		}
	})
}
