package proxyquit

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// post sends the binary-mode event for the done pod with the given
// Authorization header ("" for none) and returns the status and body.
func post(t *testing.T, url, authorization string, h *harness) (int, string) {
	t.Helper()
	e := newEvent(t, donePod("job-1", "uid-1"))
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(e.Data())))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range map[string]string{"ce-specversion": "1.0", "ce-type": e.Type(), "ce-id": e.ID(), "ce-source": e.Source(), "ce-subject": e.Subject()} {
		req.Header.Set(k, v)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func serve(t *testing.T, h *harness) string {
	t.Helper()
	handler := h.fn.HTTPHandler(context.Background(), prometheus.NewRegistry())
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv.URL
}

// apiCalls counts the fake API server's actions of a verb and resource.
func apiCalls(h *harness, verb, resource string) int {
	n := 0
	for _, a := range h.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// TestOnlyTheDispatcherMayCall: a caller without a token is refused 401
// before any API call; a token the API server does not accept for the
// function's audience is 401; another ServiceAccount's valid token is 403;
// the dispatcher's token gets the quit. Nothing but the last execs.
func TestOnlyTheDispatcherMayCall(t *testing.T) {
	h := newHarness(t, DefaultConfig(), optedIn, donePod("job-1", "uid-1"))
	url := serve(t, h)
	h.client.ClearActions()

	for _, tc := range []struct {
		name, authorization string
		code                int
		body                string
	}{
		{"no token", "", 401, OutcomeUnauthenticated},
		{"not a bearer token", "Basic YWRtaW46YWRtaW4=", 401, OutcomeUnauthenticated},
		{"a token the API server refuses", "Bearer forged", 401, OutcomeUnauthenticated},
		{"another ServiceAccount", "Bearer " + strangerToken, 403, OutcomeForbidden},
	} {
		code, body := post(t, url, tc.authorization, h)
		if code != tc.code || body != tc.body {
			t.Errorf("%s: %d %q, want %d %q", tc.name, code, body, tc.code, tc.body)
		}
		if tc.authorization == "" && len(h.client.Actions()) != 0 {
			t.Errorf("%s: API calls %v before refusing", tc.name, h.client.Actions())
		}
	}
	if n := len(h.exec.Calls()); n != 0 {
		t.Fatalf("refused callers caused %d execs", n)
	}
	if n := apiCalls(h, "get", "pods"); n != 0 {
		t.Errorf("refused callers caused %d pod reads", n)
	}
	if code, body := post(t, url, "Bearer "+dispatcherToken, h); code != 200 || body != OutcomeQuit {
		t.Errorf("dispatcher: %d %q, want 200 %q", code, body, OutcomeQuit)
	}
	if n := len(h.exec.Calls()); n != 1 {
		t.Errorf("dispatcher: %d execs, want 1", n)
	}
}

// TestTokenReviewsAreCached: a dispatcher's stream of events costs one
// TokenReview a minute; refused tokens are cached too; a review the API
// server could not answer is 503 (retried) and not cached.
func TestTokenReviewsAreCached(t *testing.T) {
	h := newHarness(t, DefaultConfig(), optedIn, donePod("job-1", "uid-1"))
	now := time.Unix(1_700_000_000, 0)
	h.fn.auth.now = func() time.Time { return now }
	url := serve(t, h)
	h.client.ClearActions()
	for range 5 {
		post(t, url, "Bearer "+dispatcherToken, h)
		post(t, url, "Bearer forged", h)
	}
	if n := apiCalls(h, "create", "tokenreviews"); n != 2 {
		t.Errorf("%d TokenReviews for 10 requests with 2 tokens, want 2", n)
	}
	now = now.Add(tokenTTL)
	post(t, url, "Bearer "+dispatcherToken, h)
	if n := apiCalls(h, "create", "tokenreviews"); n != 3 {
		t.Errorf("after the TTL: %d TokenReviews, want 3", n)
	}

	h.client.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver down")
	})
	for range 2 {
		if code, body := post(t, url, "Bearer new-token", h); code != 503 || body != OutcomeError {
			t.Errorf("review failing: %d %q, want 503 %q", code, body, OutcomeError)
		}
	}
	if n := apiCalls(h, "create", "tokenreviews"); n != 5 {
		t.Errorf("failed reviews were cached: %d TokenReviews, want 5", n)
	}
}

func TestAuthOff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Auth.Disabled = true
	h := newHarness(t, cfg, optedIn, donePod("job-1", "uid-1"))
	if code, _ := post(t, serve(t, h), "", h); code != 200 {
		t.Errorf("auth off, no token: %d, want 200", code)
	}
}

func TestAllowedCallers(t *testing.T) {
	for _, tc := range []struct {
		callers []string
		user    string
		want    bool
	}{
		{DefaultCallers, "system:serviceaccount:istio-aux:istio-aux-bridge", true},
		{DefaultCallers, "system:serviceaccount:istio-aux:default", false},
		{DefaultCallers, "system:serviceaccount:istio-aux:istio-aux-bridge-2", false},
		{DefaultCallers, "system:serviceaccount:other:istio-aux-bridge", false},
		{[]string{"system:serviceaccount:istio-aux:oidc-*"}, "system:serviceaccount:istio-aux:oidc-apiserversource-x", true},
		{[]string{"system:serviceaccount:istio-aux:oidc-*"}, "system:serviceaccount:other:oidc-x", false},
	} {
		if got := allowed(tc.callers, tc.user); got != tc.want {
			t.Errorf("allowed(%q, %s) = %v", tc.callers, tc.user, got)
		}
	}
}

// TestAnswersCarryTheOutcomeOnly: what the function learns about a pod (its
// live uid, whether it exists, its opt-in) is logged, never told to the
// caller.
func TestAnswersCarryTheOutcomeOnly(t *testing.T) {
	live := donePod("job-1", "uid-live-secret")
	h := newHarness(t, DefaultConfig(), optedIn, live)
	code, body := post(t, serve(t, h), "Bearer "+dispatcherToken, h)
	if code != 200 || body != OutcomeUIDMismatch {
		t.Errorf("uid mismatch: %d %q, want 200 %q", code, body, OutcomeUIDMismatch)
	}
	if strings.Contains(body, "uid-live-secret") {
		t.Error("the answer names the live pod's uid")
	}
}

// TestServerCutsOffSlowClients: a caller that dribbles its request is
// disconnected after the read timeout instead of holding the connection.
func TestServerCutsOffSlowClients(t *testing.T) {
	srv := NewServer("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.ReadAll(r.Body) }))
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.IdleTimeout <= 0 || srv.WriteTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Fatalf("server without timeouts or header bound: %+v", srv)
	}
	srv.ReadTimeout, srv.ReadHeaderTimeout = 300*time.Millisecond, 300*time.Millisecond
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	_, _ = conn.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"))
	// Dribble a byte every 100 ms until the server hangs up.
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = bufio.NewReader(conn).ReadString(0) // returns when the server closes
	}()
	for i := 0; ; i++ {
		select {
		case <-done:
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("slow client held on for %v", d)
			}
			return
		case <-time.After(100 * time.Millisecond):
			if _, err := conn.Write([]byte("x")); err != nil {
				return
			}
			if i > 100 {
				t.Fatal("the server never cut off a client sending a byte every 100 ms")
			}
		}
	}
}
