package dispatch

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestBearerPresentsTheRotatedToken(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	now := time.Unix(1_700_000_000, 0)
	b := newBearer(http.DefaultTransport, file)
	b.now = func() time.Time { return now }
	client := &http.Client{Transport: b}
	get := func() error {
		resp, err := client.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}
	write("second") // the kubelet rotated it
	_ = get()       // within a minute: the token read before
	now = now.Add(tokenReread)
	_ = get()
	want := []string{"Bearer first", "Bearer first", "Bearer second"}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("Authorization headers %q, want %q", got, want)
	}
	// No token, no request: the dispatcher naks and retries.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	now = now.Add(tokenReread)
	if err := get(); err == nil {
		t.Error("a request went out without the token")
	}
	if len(got) != 3 {
		t.Errorf("%d requests reached the server", len(got))
	}
}
