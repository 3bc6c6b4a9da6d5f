package cluster

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Consistently passes only a condition that held at every call, and says
// how it stopped holding otherwise.
func TestConsistently(t *testing.T) {
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
			err := Consistently(context.Background(), time.Millisecond, 200*time.Millisecond, func(context.Context) (bool, error) {
				calls++
				return tc.cond(calls)
			})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Consistently = %v, want %v", err, tc.want)
			}
			if tc.want == nil && calls < 10 {
				t.Fatalf("only %d calls in the period: it did not keep checking", calls)
			}
		})
	}
}
