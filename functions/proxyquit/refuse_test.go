package proxyquit

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"knative.dev/pkg/logging"
)

// TestRefusalsAreCheapToLog: any pod can get a token for the function's
// audience, and forge one before the keys are read, so refusals are the
// caller's to send as often as it likes: each is counted, and a caller is
// warned of at most once per refusalLogInterval, the next warning saying
// how many refusals went unlogged meanwhile.
func TestRefusalsAreCheapToLog(t *testing.T) {
	h := newHarness(t, DefaultConfig(), optedIn, donePod("job-1", "uid-1"))
	now := time.Now()
	h.fn.auth.now = func() time.Time { return now }
	core, logs := observer.New(zap.DebugLevel)
	srv := httptest.NewServer(h.fn.HTTPHandler(logging.WithLogger(context.Background(), zap.New(core).Sugar()), prometheus.NewRegistry()))
	t.Cleanup(srv.Close)
	warnings := func() []observer.LoggedEntry { return logs.TakeAll() }
	refuse := func(n int, token func(i int) string, code int) []observer.LoggedEntry {
		t.Helper()
		for i := range n {
			if got, _ := post(t, srv.URL, "Bearer "+token(i), h); got != code {
				t.Fatalf("%.40s: %d, want %d", token(i), got, code)
			}
		}
		var warned []observer.LoggedEntry
		for _, e := range warnings() {
			if e.Level == zapcore.WarnLevel {
				warned = append(warned, e)
			}
		}
		return warned
	}
	stranger := func(int) string { return strangerToken }
	if w := refuse(200, stranger, 403); len(w) != 1 || w[0].ContextMap()["caller"] != strangerUser {
		t.Errorf("200 refusals of one caller: %s; want one naming it", describe(w))
	}
	if n := h.count("", OutcomeForbidden); n != 200 {
		t.Errorf("forbidden counted %v times, want 200", n)
	}
	// Another caller has a warning of its own.
	other := signToken(tokenSpec{subject: "system:serviceaccount:team-b:default"})
	if w := refuse(50, func(int) string { return other }, 403); len(w) != 1 {
		t.Errorf("50 refusals of a second caller: %d warnings, want 1", len(w))
	}
	// A minute later, the next refusal warns again, with the count.
	now = now.Add(refusalLogInterval)
	if w := refuse(1, stranger, 403); len(w) != 1 || w[0].ContextMap()["refusedSinceLastWarning"] != int64(199) {
		t.Errorf("the first refusal a minute later: %s; want one saying 199 more", describe(w))
	}
	// Before the keys are read, subjects are their sender's to choose:
	// they share one warning.
	h.fn.auth.keys = &issuerKeys{}
	claimed := func(i int) string {
		return signToken(tokenSpec{subject: fmt.Sprintf("system:serviceaccount:ns-%d:sa", i), key: otherKey})
	}
	if w := refuse(100, claimed, 403); len(w) != 1 || w[0].ContextMap()["caller"] != nil {
		t.Errorf("100 forged subjects: %s; want one, naming no caller", describe(w))
	}
	// So do the requests the budget of unverified reviews defers.
	forged := func(i int) string {
		return signToken(tokenSpec{key: otherKey, expires: now.Add(time.Hour + time.Duration(i)*time.Second)})
	}
	refuse(unverifiedReviewsBurst, forged, 401)
	if w := refuse(100, func(i int) string { return forged(unverifiedReviewsBurst + i) }, 503); len(w) != 1 {
		t.Errorf("100 deferred reviews: %d warnings, want 1", len(w))
	}
	if n := h.count("", OutcomeError); n != 100 {
		t.Errorf("deferred requests counted %v times, want 100", n)
	}
}

// describe says how many warnings there are, and what the first says.
func describe(w []observer.LoggedEntry) string {
	if len(w) == 0 {
		return "no warning"
	}
	return fmt.Sprintf("%d warnings, the first with %v", len(w), w[0].ContextMap())
}

// TestRefusalLogIsBounded: callers known for sure are as many as the
// ServiceAccounts that pods run as; past maxRefusalLogKeys of them in an
// interval, the others share one warning.
func TestRefusalLogIsBounded(t *testing.T) {
	now := time.Now()
	l := &refusalLog{now: func() time.Time { return now }, seen: map[string]*refusalCount{}}
	warned := 0
	for i := range 1000 {
		if warn, _ := l.admit(fmt.Sprintf("forbidden sa-%d", i)); warn {
			warned++
		}
	}
	if warned != maxRefusalLogKeys+1 || len(l.seen) > maxRefusalLogKeys+1 {
		t.Errorf("1,000 callers in an interval: %d warnings, %d keys; want %d, at most %d", warned, len(l.seen), maxRefusalLogKeys+1, maxRefusalLogKeys+1)
	}
	now = now.Add(refusalLogInterval)
	if warn, _ := l.admit("forbidden sa-new"); !warn || len(l.seen) > maxRefusalLogKeys+1 {
		t.Errorf("an interval later, a new caller: warned %v, %d keys", warn, len(l.seen))
	}
}
