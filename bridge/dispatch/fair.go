package dispatch

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// queue holds the messages a dispatcher took from the consumer until a
// worker has delivered them: one FIFO per namespace, served in turn, and no
// namespace with more than perNamespace deliveries under way. A namespace
// with a thousand events waiting (a tenant's pods whose quits fail, a burst
// of Jobs) then delays another namespace's event by at most one turn, not by
// its whole backlog. When only one namespace has work, it gets every worker
// up to its cap.
type queue struct {
	perNamespace int

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every push and done
	byNS      map[string]*nsQueue
	ring      []string // namespaces with waiting messages, next turn first
	held      map[jetstream.Msg]struct{}
	waitingN  int
	inFlightN int
}

type nsQueue struct {
	waiting  []jetstream.Msg
	inFlight int
}

// item is one message handed to a worker.
type item struct {
	msg       jetstream.Msg
	namespace string
}

func newQueue(perNamespace int) *queue {
	return &queue{perNamespace: max(perNamespace, 1), changed: make(chan struct{}),
		byNS: map[string]*nsQueue{}, held: map[jetstream.Msg]struct{}{}}
}

// push adds a message of namespace (the pod's; "" when its subject names
// none) to the end of its namespace's line.
func (q *queue) push(msg jetstream.Msg, namespace string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ns := q.byNS[namespace]
	if ns == nil {
		ns = &nsQueue{}
		q.byNS[namespace] = ns
	}
	if len(ns.waiting) == 0 {
		q.ring = append(q.ring, namespace)
	}
	ns.waiting = append(ns.waiting, msg)
	q.held[msg] = struct{}{}
	q.waitingN++
	q.signal()
}

// next takes the first waiting message of the first namespace in turn that
// is under its cap, waiting for one until ctx is done (ok false).
func (q *queue) next(ctx context.Context) (item, bool) {
	for {
		q.mu.Lock()
		if it, ok := q.take(); ok {
			q.mu.Unlock()
			return it, true
		}
		changed := q.changed
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return item{}, false
		case <-changed:
		}
	}
}

func (q *queue) take() (item, bool) {
	for i, name := range q.ring {
		ns := q.byNS[name]
		if ns.inFlight >= q.perNamespace {
			continue
		}
		msg := ns.waiting[0]
		ns.waiting[0] = nil
		ns.waiting = ns.waiting[1:]
		ns.inFlight++
		q.waitingN--
		q.inFlightN++
		// Its turn is spent: to the back of the line, or out of it.
		q.ring = append(q.ring[:i], q.ring[i+1:]...)
		if len(ns.waiting) > 0 {
			q.ring = append(q.ring, name)
		}
		return item{msg: msg, namespace: name}, true
	}
	return item{}, false
}

// done ends a delivery taken with next: the message is settled.
func (q *queue) done(it item) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ns := q.byNS[it.namespace]
	ns.inFlight--
	q.inFlightN--
	delete(q.held, it.msg)
	if ns.inFlight == 0 && len(ns.waiting) == 0 {
		delete(q.byNS, it.namespace)
	}
	q.signal()
}

func (q *queue) signal() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// each calls f on every message held, waiting or in delivery.
func (q *queue) each(f func(jetstream.Msg)) {
	q.mu.Lock()
	msgs := make([]jetstream.Msg, 0, len(q.held))
	for m := range q.held {
		msgs = append(msgs, m)
	}
	q.mu.Unlock()
	for _, m := range msgs {
		f(m)
	}
}

// drain removes and returns every waiting message (at shutdown).
func (q *queue) drain() []jetstream.Msg {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []jetstream.Msg
	for _, name := range q.ring {
		ns := q.byNS[name]
		out = append(out, ns.waiting...)
		for _, m := range ns.waiting {
			delete(q.held, m)
		}
		q.waitingN -= len(ns.waiting)
		ns.waiting = nil
		if ns.inFlight == 0 {
			delete(q.byNS, name)
		}
	}
	q.ring = nil
	return out
}

// sizes are the messages waiting and in delivery.
func (q *queue) sizes() (waiting, inFlight int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waitingN, q.inFlightN
}
