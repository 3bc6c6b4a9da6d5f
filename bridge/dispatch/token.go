package dispatch

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// tokenReread is how often the token file is read again: the kubelet
// rotates a projected ServiceAccount token well before it expires (at 80%
// of its lifetime, an hour or more), so a minute-old read is always valid.
const tokenReread = time.Minute

// bearer is an http.RoundTripper that presents the token in a file (a
// projected ServiceAccount token made for the function's audience) on every
// request, as the proxy-quit function requires of its callers.
type bearer struct {
	next http.RoundTripper
	file string
	now  func() time.Time

	mu    sync.Mutex
	token string
	read  time.Time
}

func newBearer(next http.RoundTripper, file string) *bearer {
	return &bearer{next: next, file: file, now: time.Now}
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	token, err := b.current()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return b.next.RoundTrip(r)
}

func (b *bearer) current() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.token != "" && b.now().Sub(b.read) < tokenReread {
		return b.token, nil
	}
	raw, err := os.ReadFile(b.file)
	if err != nil {
		return "", fmt.Errorf("reading the sink token: %w", err)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" {
		return "", fmt.Errorf("the sink token file %s is empty", b.file)
	}
	b.token, b.read = token, b.now()
	return token, nil
}
