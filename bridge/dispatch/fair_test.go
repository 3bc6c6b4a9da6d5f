package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// fakeMsg is a message only told apart by its name.
type fakeMsg struct {
	jetstream.Msg
	name string
}

func TestQueueServesNamespacesInTurn(t *testing.T) {
	q := newQueue(2, 4) // four workers: nothing to lend beyond the five under way
	push := func(ns string, names ...string) {
		for _, n := range names {
			q.push(&fakeMsg{name: n}, ns)
		}
	}
	push("busy", "b1", "b2", "b3", "b4", "b5")
	push("quiet", "q1")
	push("other", "o1", "o2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	take := func() item {
		it, ok := q.next(ctx)
		if !ok {
			t.Fatal("nothing to take")
		}
		return it
	}
	var got []string
	var taken []item
	for range 5 {
		it := take()
		taken = append(taken, it)
		got = append(got, it.msg.(*fakeMsg).name)
	}
	// In turn, each namespace at most two under way: busy's third waits.
	want := []string{"b1", "q1", "o1", "b2", "o2"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("served %v, want %v", got, want)
		}
	}
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if it, ok := q.next(short); ok {
		t.Fatalf("took %s past busy's share", it.msg.(*fakeMsg).name)
	}
	if waiting, inFlight := q.sizes(); waiting != 3 || inFlight != 5 {
		t.Errorf("sizes = %d waiting, %d in flight; want 3, 5", waiting, inFlight)
	}
	q.done(taken[0]) // b1 settled: busy may have one more under way
	if it := take(); it.msg.(*fakeMsg).name != "b3" {
		t.Errorf("after b1 settled, took %s, want b3", it.msg.(*fakeMsg).name)
	}
	held := 0
	q.each(func(jetstream.Msg) { held++ })
	if held != 7 {
		t.Errorf("%d messages held, want 7 (2 waiting, 5 in flight)", held)
	}
	if drained := q.drain(); len(drained) != 2 {
		t.Errorf("drained %d, want the 2 waiting", len(drained))
	}
}

// TestQueueLendsIdleWorkersToALoneNamespace: a burst in one namespace uses
// the workers the others leave idle, but never the last share's worth, so a
// namespace arriving during the loan starts at once; and the loan stops
// while another namespace waits.
func TestQueueLendsIdleWorkersToALoneNamespace(t *testing.T) {
	q := newQueue(2, 8) // a share of 2; at most 6 under way on loan
	for i := range 10 {
		q.push(&fakeMsg{name: fmt.Sprintf("b%d", i)}, "burst")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var taken []item
	for range 6 {
		it, ok := q.next(ctx)
		if !ok {
			t.Fatalf("took %d of burst's messages with the other workers idle, want 6", len(taken))
		}
		taken = append(taken, it)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if it, ok := q.next(short); ok {
		t.Fatalf("lent a seventh worker (%s): the last share is not to lend", it.msg.(*fakeMsg).name)
	}
	q.push(&fakeMsg{name: "late"}, "late")
	if it, ok := q.next(ctx); !ok || it.namespace != "late" {
		t.Fatalf("a namespace arriving during the loan: took %+v, want late's message at once", it)
	}
	// Two namespaces waiting: in turn, and burst, at its share, waits while
	// other has a message waiting, however many workers are idle.
	q.push(&fakeMsg{name: "o1"}, "other")
	q.push(&fakeMsg{name: "o2"}, "other")
	for _, it := range taken[:5] {
		q.done(it)
	}
	for i, want := range []string{"burst", "other", "other", "burst"} {
		it, ok := q.next(ctx)
		if !ok || it.namespace != want {
			t.Fatalf("take %d: %+v, want %s's (burst at its share waits while other has one waiting, then borrows again)", i, it, want)
		}
	}
}
