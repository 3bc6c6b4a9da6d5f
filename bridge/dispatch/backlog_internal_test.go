package dispatch

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/istio-aux/istio-aux/bridge/metrics"
)

// infoFunc is a consumerInfo.
type infoFunc func() (*jetstream.ConsumerInfo, error)

func (f infoFunc) Info(context.Context) (*jetstream.ConsumerInfo, error) { return f() }

// TestBacklogStandsWhenUnreadable: a consumer that cannot be read (NATS
// down) leaves the last backlog in place rather than reporting none.
func TestBacklogStandsWhenUnreadable(t *testing.T) {
	d := New(nil, nil, metrics.NewDispatch(nil), Options{})
	d.readBacklog(context.Background(), infoFunc(func() (*jetstream.ConsumerInfo, error) {
		return &jetstream.ConsumerInfo{NumPending: 3, NumAckPending: 4}, nil
	}))
	if got := testutil.ToFloat64(d.m.Backlog); got != 7 {
		t.Fatalf("backlog = %v, want 7 (3 undelivered + 4 awaiting their ack)", got)
	}
	d.readBacklog(context.Background(), infoFunc(func() (*jetstream.ConsumerInfo, error) {
		return nil, errors.New("nats: connection closed")
	}))
	if got := testutil.ToFloat64(d.m.Backlog); got != 7 {
		t.Errorf("backlog = %v after a failed read, want the last value 7", got)
	}
}
