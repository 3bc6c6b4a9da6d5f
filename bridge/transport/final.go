package transport

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
	// FinalBucket is the key-value bucket of final failures.
	FinalBucket = "istio-aux-final"
	// FinalFor is how long a final failure is remembered. Past it, the
	// resync tries the pod once more: what made the quit impossible may
	// have been mended (the exec policy, the quit command, the namespace's
	// opt-in), and a pod that did not change would otherwise wait for
	// ever. One delivery per such pod an hour costs next to nothing.
	FinalFor = time.Hour
	// finalMaxBytes bounds the bucket: a marker is under 200 bytes.
	finalMaxBytes = 16 << 20
)

// EnsureFinal creates or updates the bucket of final failures.
func EnsureFinal(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      FinalBucket,
		Description: "istio-aux pod states whose quit failed for good, by dedup id",
		TTL:         FinalFor,
		History:     1,
		MaxBytes:    finalMaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    Replicas(js),
	})
	if err != nil {
		return nil, fmt.Errorf("creating bucket %s: %w", FinalBucket, err)
	}
	return kv, nil
}

// FinalKey is the bucket key of a dedup id. Ids are <uid>/<hex>, which are
// valid keys as they are; anything else is refused rather than mangled.
func FinalKey(dedupID string) (string, bool) {
	if dedupID == "" || len(dedupID) > 256 {
		return "", false
	}
	for _, c := range dedupID {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '/' || c == '_' || c == '=') {
			return "", false
		}
	}
	return dedupID, true
}
