package publish

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/transport"
)

// finals mirrors transport.FinalBucket in memory: the dedup ids of pod
// states whose quit failed for good, and when each was recorded. Publish
// consults it on every call, so it must cost no round trip.
type finals struct {
	mu  sync.Mutex
	ids map[string]time.Time
	now func() time.Time
}

func newFinals() *finals { return &finals{ids: map[string]time.Time{}, now: time.Now} }

// has reports whether id was recorded less than transport.FinalFor ago
// (the bucket's TTL, which removes entries without telling watchers).
func (f *finals) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.ids[id]
	return ok && f.now().Sub(at) < transport.FinalFor
}

// pruneEvery is how many recorded ids may accumulate before expired ones
// are swept.
const pruneEvery = 4096

func (f *finals) put(id string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ids)%pruneEvery == pruneEvery-1 {
		now := f.now()
		for k, t := range f.ids {
			if now.Sub(t) >= transport.FinalFor {
				delete(f.ids, k)
			}
		}
	}
	f.ids[id] = at
}

func (f *finals) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ids, id)
}

// watchFinals keeps the mirror current until ctx is done: the bucket's
// entries at start, then every change, re-watching after a failure.
func (p *Publisher) watchFinals(ctx context.Context) {
	logger := logging.FromContext(ctx)
	for wait := time.Second; ctx.Err() == nil; wait = min(2*wait, 30*time.Second) {
		if err := p.mirrorFinals(ctx); err != nil {
			logger.Warnw("Watching the final failures; retrying", zap.Error(err))
		} else {
			wait = time.Second
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

func (p *Publisher) mirrorFinals(ctx context.Context) error {
	kv, err := transport.EnsureFinal(ctx, p.js)
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil { // the entries at start are all in
				continue
			}
			if e.Operation() == jetstream.KeyValuePut {
				p.finals.put(e.Key(), e.Created())
			} else {
				p.finals.remove(e.Key())
			}
		}
	}
}
