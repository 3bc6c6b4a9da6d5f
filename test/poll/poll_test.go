package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// While passes only a condition that held at every call, and says how it
// stopped holding otherwise.
func TestWhile(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		cond func(calls int) (bool, error)
		want error
	}{
		{"holds", func(int) (bool, error) { return true, nil }, nil},
		{"stops", func(calls int) (bool, error) { return calls < 3, nil }, ErrStopped},
		{"fails", func(calls int) (bool, error) {
			if calls < 2 {
				return true, nil
			}
			return false, boom
		}, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := While(context.Background(), time.Second, func(context.Context) (bool, error) {
				calls++
				return tc.cond(calls)
			})
			if !errors.Is(err, tc.want) {
				t.Fatalf("While = %v, want %v", err, tc.want)
			}
			if tc.want == nil && calls < 5 {
				t.Fatalf("only %d calls in the period: it did not keep checking", calls)
			}
		})
	}
}

// Until retries a condition's errors, says the last one on a timeout, and
// stops at once on a Permanent one.
func TestUntil(t *testing.T) {
	calls := 0
	err := Until(context.Background(), 300*time.Millisecond, func(context.Context) (bool, error) {
		calls++
		return false, errors.New("not yet")
	})
	if err == nil || !strings.Contains(err.Error(), "not yet") || calls < 2 {
		t.Fatalf("Until = %v after %d calls; want a timeout naming the last error, after retries", err, calls)
	}
	calls = 0
	dead := errors.New("dead")
	if err := Until(context.Background(), time.Minute, func(context.Context) (bool, error) {
		calls++
		return false, Permanent(dead)
	}); !errors.Is(err, dead) || calls != 1 {
		t.Fatalf("Until = %v after %d calls; want the permanent error at once", err, calls)
	}
	if err := Until(context.Background(), time.Second, func(context.Context) (bool, error) { calls++; return calls > 3, nil }); err != nil {
		t.Fatal(err)
	}
}
