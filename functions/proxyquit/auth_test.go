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
	authenticationv1 "k8s.io/api/authentication/v1"
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

// TestOnlyTheDispatcherMayCall: a caller without a token is refused 401,
// so is a token that is not one of this cluster's for the function's
// audience, and another ServiceAccount's valid token is 403, all before
// any API call; the dispatcher's token gets the quit. Nothing but the last
// execs.
func TestOnlyTheDispatcherMayCall(t *testing.T) {
	h := newHarness(t, DefaultConfig(), optedIn, donePod("job-1", "uid-1"))
	url := serve(t, h)
	h.client.ClearActions()

	for _, tc := range []struct {
		name, authorization string
		code                int
		body                Outcome
	}{
		{"no token", "", 401, OutcomeUnauthenticated},
		{"not a bearer token", "Basic YWRtaW46YWRtaW4=", 401, OutcomeUnauthenticated},
		{"a token the API server refuses", "Bearer forged", 401, OutcomeUnauthenticated},
		{"another ServiceAccount", "Bearer " + strangerToken, 403, OutcomeForbidden},
	} {
		code, body := post(t, url, tc.authorization, h)
		if code != tc.code || body != string(tc.body) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, code, body, tc.code, tc.body)
		}
		if len(h.client.Actions()) != 0 {
			t.Errorf("%s: API calls %v before refusing", tc.name, h.client.Actions())
		}
	}
	if n := len(h.exec.Calls()); n != 0 {
		t.Fatalf("refused callers caused %d execs", n)
	}
	if n := apiCalls(h, "get", "pods"); n != 0 {
		t.Errorf("refused callers caused %d pod reads", n)
	}
	if code, body := post(t, url, "Bearer "+dispatcherToken, h); code != 200 || body != string(OutcomeQuit) {
		t.Errorf("dispatcher: %d %q, want 200 %q", code, body, OutcomeQuit)
	}
	if n := len(h.exec.Calls()); n != 1 {
		t.Errorf("dispatcher: %d execs, want 1", n)
	}
}

// TestWhatCannotBeATokenCostsNoAPICall is row 2 of the README's attacks:
// tokens that cannot be valid are refused from what they carry and the
// cluster's published keys, with no TokenReview.
func TestWhatCannotBeATokenCostsNoAPICall(t *testing.T) {
	h := newHarness(t, DefaultConfig(), optedIn, donePod("job-1", "uid-1"))
	url := serve(t, h)
	h.client.ClearActions()
	junk := map[string]string{
		"a random string":                "Bearer " + strings.Repeat("x7Qz", 40),
		"alg none":                       "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
		"signed by another key":          "Bearer " + signToken(tokenSpec{key: otherKey}),
		"signed by another key, no kid":  "Bearer " + signToken(tokenSpec{key: otherKey, kid: "unknown"}),
		"expired":                        "Bearer " + signToken(tokenSpec{expires: time.Now().Add(-time.Second)}),
		"for the API server's audience":  "Bearer " + signToken(tokenSpec{audience: []string{"https://kubernetes.default.svc"}}),
		"from another issuer":            "Bearer " + signToken(tokenSpec{issuer: "https://elsewhere.example"}),
		"the dispatcher's, one byte off": "Bearer " + dispatcherToken[:len(dispatcherToken)-2] + "AA",
	}
	for name, authorization := range junk {
		if code, body := post(t, url, authorization, h); code != 401 || body != string(OutcomeUnauthenticated) {
			t.Errorf("%s: %d %q, want 401", name, code, body)
		}
	}
	if len(h.client.Actions()) != 0 {
		t.Errorf("junk tokens made API calls: %v", h.client.Actions())
	}
}

// TestReviewsHonourExpiryAndRevocation is row 9 of the README's attacks:
// the dispatcher's token is reviewed once per reviewTTL, never accepted
// after it expires (no review needed to refuse it), and refused within
// reviewTTL once the API server stops honouring it (revoked: its pod or
// ServiceAccount deleted). A review the API server could not answer is 503
// (retried) and not cached.
func TestReviewsHonourExpiryAndRevocation(t *testing.T) {
	h := newHarness(t, DefaultConfig(), optedIn, donePod("job-1", "uid-1"))
	now := time.Now()
	h.fn.auth.now = func() time.Time { return now }
	url := serve(t, h)
	h.client.ClearActions()
	reviews := func() int { return apiCalls(h, "create", "tokenreviews") }

	for range 5 {
		post(t, url, "Bearer "+dispatcherToken, h)
	}
	if n := reviews(); n != 1 {
		t.Errorf("%d TokenReviews for 5 requests with one token, want 1", n)
	}
	now = now.Add(reviewTTL)
	post(t, url, "Bearer "+dispatcherToken, h)
	if n := reviews(); n != 2 {
		t.Errorf("after reviewTTL: %d TokenReviews, want 2", n)
	}

	// Expiry: accepted until its exp, refused from then on, unreviewed.
	short := signToken(tokenSpec{expires: now.Add(3 * time.Second)})
	h.client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if r.Spec.Token != short {
			return false, nil, nil
		}
		r.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: r.Spec.Audiences, User: authenticationv1.UserInfo{Username: dispatcherUser}}
		return true, r, nil
	})
	if code, _ := post(t, url, "Bearer "+short, h); code != 200 {
		t.Fatalf("a token 3 s from its expiry: %d, want 200", code)
	}
	before := reviews()
	now = now.Add(3 * time.Second)
	if code, body := post(t, url, "Bearer "+short, h); code != 401 || body != string(OutcomeUnauthenticated) {
		t.Errorf("the token at its expiry: %d %q, want 401", code, body)
	}
	if reviews() != before {
		t.Error("an expired token was reviewed")
	}

	// Revocation: the API server stops honouring the dispatcher's token.
	revoked := false
	h.client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !revoked {
			return false, nil, nil
		}
		r := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		r.Status = authenticationv1.TokenReviewStatus{Error: "pod \"istio-aux-bridge-x\" not found"}
		return true, r, nil
	})
	now = now.Add(reviewTTL)
	if code, _ := post(t, url, "Bearer "+dispatcherToken, h); code != 200 {
		t.Fatalf("before the revocation: %d, want 200", code)
	}
	revoked = true
	now = now.Add(reviewTTL - time.Millisecond)
	if code, _ := post(t, url, "Bearer "+dispatcherToken, h); code != 200 {
		t.Errorf("within reviewTTL of the last review: %d, want 200 (the cached answer)", code)
	}
	now = now.Add(time.Millisecond)
	if code, body := post(t, url, "Bearer "+dispatcherToken, h); code != 401 || body != string(OutcomeUnauthenticated) {
		t.Errorf("reviewTTL after the revocation: %d %q, want 401", code, body)
	}

	h.client.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver down")
	})
	fresh := signToken(tokenSpec{expires: now.Add(time.Hour)})
	before = reviews()
	for range 2 {
		if code, body := post(t, url, "Bearer "+fresh, h); code != 503 || body != string(OutcomeError) {
			t.Errorf("review failing: %d %q, want 503 %q", code, body, OutcomeError)
		}
	}
	if n := reviews() - before; n != 2 {
		t.Errorf("failed reviews were cached: %d TokenReviews, want 2", n)
	}
}

// TestWithoutTheClusterKeys: a cluster that does not publish its keys (or
// before they are read) still refuses what it can without an API call, and
// reviews the rest: a forged token that claims to be the dispatcher's costs
// one review, and is refused.
func TestWithoutTheClusterKeys(t *testing.T) {
	h := newHarness(t, DefaultConfig(), optedIn, donePod("job-1", "uid-1"))
	h.fn.auth.keys = &issuerKeys{}
	url := serve(t, h)
	h.client.ClearActions()
	for _, authorization := range []string{"Bearer forged", "Bearer " + signToken(tokenSpec{expires: time.Now().Add(-time.Minute)}),
		"Bearer " + signToken(tokenSpec{audience: []string{"other"}})} {
		if code, _ := post(t, url, authorization, h); code != 401 {
			t.Errorf("%.40s: %d, want 401", authorization, code)
		}
	}
	if code, _ := post(t, url, "Bearer "+strangerToken, h); code != 403 {
		t.Errorf("another ServiceAccount: %d, want 403", code)
	}
	if len(h.client.Actions()) != 0 {
		t.Errorf("API calls %v for what the claims alone refuse", h.client.Actions())
	}
	if code, _ := post(t, url, "Bearer "+signToken(tokenSpec{key: otherKey}), h); code != 401 {
		t.Errorf("a forged dispatcher token: %d, want 401", code)
	}
	if code, _ := post(t, url, "Bearer "+dispatcherToken, h); code != 200 {
		t.Errorf("the dispatcher: %d, want 200", code)
	}
	if n := apiCalls(h, "create", "tokenreviews"); n != 2 {
		t.Errorf("%d TokenReviews, want 2 (the forged token and the dispatcher's)", n)
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
	if code != 200 || body != string(OutcomeUIDMismatch) {
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
