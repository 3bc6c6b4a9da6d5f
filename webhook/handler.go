package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/istio-aux/istio-aux/webhook/admission"
)

// MaxReviewBytes is the largest AdmissionReview the webhook reads: the API
// server's 3 MiB limit on a request's body (the pod) and room for the review
// around it. A longer one is answered 413, and the API server refuses the
// pod (failurePolicy Fail); no pod the API server accepts is that large.
const MaxReviewBytes = 3<<20 + 64<<10

// ReviewBudget is how many bytes of AdmissionReviews the webhook holds at
// once: 8 of the largest. A review waits for its share before its body is
// read, so the reviews in hand, and what decoding them costs (a few small
// strings: decodeReview copies nothing else), stay within it whatever
// arrives (TestConcurrentReviewsStayBounded); ordinary reviews (about 4 KiB)
// hardly ever wait.
const ReviewBudget = 8 * MaxReviewBytes

// maxReviewTimeout bounds the wait the API server's timeout parameter may
// ask for: the longest webhook timeout it allows.
const maxReviewTimeout = 30 * time.Second

// handler serves AdmissionReviews over HTTP: it bounds what is held at once
// (ReviewBudget), reads the body once into a buffer of its declared length,
// and hands it to review (reconciler.Review).
type handler struct {
	review  func(ctx context.Context, body []byte) ([]byte, error)
	budget  *semaphore.Weighted
	synced  <-chan struct{} // closed once the informers Admit reads have synced
	metrics *metrics
}

func newHandler(review func(context.Context, []byte) ([]byte, error), synced <-chan struct{}, m *metrics) *handler {
	return &handler{review: review, budget: semaphore.NewWeighted(ReviewBudget), synced: synced, metrics: m}
}

// ServeHTTP implements http.Handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() { h.metrics.duration.Observe(time.Since(start).Seconds()) }()
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	if r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "invalid Content-Type, want application/json", http.StatusUnsupportedMediaType)
		return
	}
	size := r.ContentLength
	switch {
	case size > MaxReviewBytes:
		h.metrics.record(admission.Invalid, admission.ReasonTooLarge)
		http.Error(w, "AdmissionReview too large", http.StatusRequestEntityTooLarge)
		return
	case size < 0:
		size = MaxReviewBytes // not declared: reserve the most it may be
	}
	// The API server says how long it waits (?timeout=5s); past that an
	// answer reaches no one, and Admit stops working on it.
	ctx, cancel := withReviewTimeout(r)
	defer cancel()
	select {
	case <-h.synced:
	case <-ctx.Done():
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	if err := h.budget.Acquire(ctx, size); err != nil {
		http.Error(w, "gave up waiting for a share of the review budget", http.StatusServiceUnavailable)
		return
	}
	defer h.budget.Release(size)
	body, err := readBody(w, r)
	defer putBody(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.metrics.record(admission.Invalid, admission.ReasonTooLarge)
			http.Error(w, "AdmissionReview too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	out, err := h.review(ctx, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// readBody reads the request's body into one buffer of its declared length
// (the API server always declares it), or of what arrives, up to
// MaxReviewBytes, when it is not declared. Buffers for ordinary reviews are
// reused (putBody): each would otherwise be most of what an admission
// allocates.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength < 0 {
		return io.ReadAll(http.MaxBytesReader(w, r.Body, MaxReviewBytes))
	}
	var body []byte
	if b, ok := bodies.Get().(*[]byte); ok && int64(cap(*b)) >= r.ContentLength {
		body = (*b)[:r.ContentLength]
	} else {
		body = make([]byte, r.ContentLength)
	}
	_, err := io.ReadFull(r.Body, body)
	return body, err
}

// putBody gives a body back for reuse once nothing refers to it (Review
// copies what it keeps), unless it is larger than an ordinary review.
func putBody(body []byte) {
	if cap(body) > 0 && cap(body) <= maxPooledBody {
		bodies.Put(&body)
	}
}

var bodies sync.Pool

// maxPooledBody is the largest body buffer kept for reuse: pods are a few
// KiB; a rare large one should not stay in memory.
const maxPooledBody = 64 << 10

// withReviewTimeout is the request's context, ended by the timeout the API
// server sends with the request (?timeout=5s, up to maxReviewTimeout), if
// any.
func withReviewTimeout(r *http.Request) (context.Context, context.CancelFunc) {
	for q := r.URL.RawQuery; q != ""; {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		if v, ok := strings.CutPrefix(kv, "timeout="); ok {
			if d, err := time.ParseDuration(v); err == nil && d > 0 {
				return context.WithTimeout(r.Context(), min(d, maxReviewTimeout))
			}
		}
	}
	return context.WithCancel(r.Context())
}
