package dispatch

import (
	"context"
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
	q := newQueue(2)
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
