// Package poll is the harness's one way to wait: k8s.io/apimachinery's
// wait, at one interval, with what the suites add to it — a condition's
// errors count as "not yet" (an API server restarting, a pod not there
// yet) unless marked Permanent, and the last of them explains a timeout.
package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Interval is how often every wait of the harness looks again.
const Interval = 100 * time.Millisecond

// Cond is a condition: true when what is waited for holds.
type Cond = func(context.Context) (bool, error)

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks a condition error that no amount of polling can fix (a
// process that died, say): Until returns it at once instead of waiting out
// the timeout.
func Permanent(err error) error { return permanent{err} }

// ErrStopped is While's answer when its condition stopped holding.
var ErrStopped = errors.New("stopped holding")

// Until calls cond every Interval until it returns true, a Permanent error,
// or timeout passes.
func Until(ctx context.Context, timeout time.Duration, cond Cond) error {
	return UntilEvery(ctx, Interval, timeout, cond)
}

// UntilEvery is Until at another interval, for make bench's instruments
// only, where the interval is part of what is measured: a reading that
// must hold over so many seconds, or a look that lists thousands of
// objects from the API server whose CPU is being measured.
func UntilEvery(ctx context.Context, interval, timeout time.Duration, cond Cond) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if p := (permanent{}); errors.As(err, &p) {
			return false, p.err
		}
		if err != nil {
			last = err
		}
		return ok, nil
	})
	if err != nil && last != nil && wait.Interrupted(err) {
		return fmt.Errorf("%w (last: %w)", err, last)
	}
	return err
}

// While calls cond every Interval for the whole period and returns the
// first error or false it sees (ErrStopped): how a test shows that
// something does NOT happen within a bound. cond gets ctx itself, not one
// ending with the period: a call near the end must not fail for want of
// time (client-go's rate limiter refuses a wait that would pass a
// deadline).
func While(ctx context.Context, period time.Duration, cond Cond) error {
	err := wait.PollUntilContextTimeout(ctx, Interval, period, true, func(context.Context) (bool, error) {
		ok, err := cond(ctx)
		return !ok, err
	})
	switch {
	case err == nil:
		return ErrStopped
	case wait.Interrupted(err) && ctx.Err() == nil:
		return nil
	}
	return err
}

// Eventually fails t unless cond holds within timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond Cond) {
	t.Helper()
	if err := Until(context.Background(), timeout, cond); err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}

// Consistently fails t unless cond holds at every look for the whole
// period.
func Consistently(t testing.TB, period time.Duration, what string, cond Cond) {
	t.Helper()
	if err := While(context.Background(), period, cond); err != nil {
		t.Fatalf("%s, for %s: %v", what, period, err)
	}
}
