// Package final is the bridge's memory of final failures, in one place: the
// key-value bucket the dispatcher records them in (Record) and the mirror of
// it the publisher consults before every publish (Mirror).
package final

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/pkg/logging"
)

// Final failures: a pod state whose quit can never succeed (the function
// answered a final 4xx: the exec denied by policy, no pilot-agent in the
// container, the quit command exiting non-zero) is remembered in a
// key-value bucket under its dedup id (slim.DedupID: the pod's uid and the
// fingerprint of what the decision reads). The dispatcher writes it; the
// publisher reads it and does not publish that state again, so the bridge's
// periodic resync does not bring a hopeless quit back every few minutes. A
// new state of the pod is a new id, and is delivered.
const (
	// Bucket is the key-value bucket of final failures.
	Bucket = "istio-aux-final"
	// For is how long a final failure is remembered. Past it, the
	// resync tries the pod once more: what made the quit impossible may
	// have been mended (the exec policy, the quit command, the namespace's
	// opt-in), and a pod that did not change would otherwise wait for
	// ever. One delivery per such pod an hour costs next to nothing.
	For = time.Hour
	// maxBytes bounds the bucket: a marker is under 200 bytes.
	maxBytes = 16 << 20
	// maxReason bounds the reason stored with a final failure.
	maxReason = 512
)

// Ensure creates or updates the bucket of final failures, with as many
// copies as the stream has (transport.Replicas).
func Ensure(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "istio-aux pod states whose quit failed for good, by dedup id",
		TTL:         For,
		History:     1,
		MaxBytes:    maxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("creating bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// Key is the bucket key of a dedup id. Ids are <uid>/<hex>, which are
// valid keys as they are; anything else is refused rather than mangled.
func Key(dedupID string) (string, bool) {
	if dedupID == "" || len(dedupID) > 256 {
		return "", false
	}
	for _, c := range dedupID {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '/' && c != '_' && c != '=' {
			return "", false
		}
	}
	return dedupID, true
}

// Record stores the final failure of the pod state dedupID, with its reason
// (cut to a bound), in kv. An id that is not a valid key records nothing.
func Record(ctx context.Context, kv jetstream.KeyValue, dedupID, reason string) (bool, error) {
	key, ok := Key(dedupID)
	if !ok {
		return false, nil
	}
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	if _, err := kv.PutString(ctx, key, reason); err != nil {
		return false, err
	}
	return true, nil
}

// Mirror is the bucket in memory: the dedup ids of pod states whose quit
// failed for good, and when each was recorded. The publisher consults it
// for every event, so it must cost no round trip.
type Mirror struct {
	mu  sync.Mutex
	ids map[string]time.Time
	now func() time.Time
}

// NewMirror is an empty mirror; Follow fills it.
func NewMirror() *Mirror { return &Mirror{ids: map[string]time.Time{}, now: time.Now} }

// Has reports whether id was recorded less than For ago (the bucket's
// TTL, which removes entries without telling watchers).
func (f *Mirror) Has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.ids[id]
	return ok && f.now().Sub(at) < For
}

// pruneEvery is how many recorded ids may accumulate before expired ones
// are swept.
const pruneEvery = 4096

func (f *Mirror) put(id string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ids)%pruneEvery == pruneEvery-1 {
		now := f.now()
		for k, t := range f.ids {
			if now.Sub(t) >= For {
				delete(f.ids, k)
			}
		}
	}
	f.ids[id] = at
}

func (f *Mirror) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ids, id)
}

// Follow keeps the mirror current with the bucket in js until ctx is done:
// its entries at start, then every change, re-watching after a failure.
func (f *Mirror) Follow(ctx context.Context, js jetstream.JetStream, replicas int) {
	logger := logging.FromContext(ctx)
	for b := followBackoff(); ctx.Err() == nil; {
		if err := f.mirror(ctx, js, replicas); err != nil {
			logger.Warnw("Watching the final failures; retrying", zap.Error(err))
		} else {
			b = followBackoff() // it watched: start over
		}
		select {
		case <-ctx.Done():
		case <-time.After(b.Step()):
		}
	}
}

// followBackoff spaces out the watches of the bucket: a second, doubled
// each time up to 30 s.
func followBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}
}

func (f *Mirror) mirror(ctx context.Context, js jetstream.JetStream, replicas int) error {
	kv, err := Ensure(ctx, js, replicas)
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
				f.put(e.Key(), e.Created())
			} else {
				f.remove(e.Key())
			}
		}
	}
}
