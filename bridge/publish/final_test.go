package publish

import (
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/bridge/transport"
)

// TestFinalsExpire: a final failure is honoured for transport.FinalFor (the
// bucket's TTL), after which the pod is tried once more.
func TestFinalsExpire(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := newFinals()
	f.now = func() time.Time { return now }
	f.put("uid-a/1", now)
	if !f.has("uid-a/1") || f.has("uid-a/2") {
		t.Fatal("has() does not follow put()")
	}
	now = now.Add(transport.FinalFor - time.Second)
	if !f.has("uid-a/1") {
		t.Error("forgotten before FinalFor")
	}
	now = now.Add(time.Second)
	if f.has("uid-a/1") {
		t.Error("still honoured after FinalFor")
	}
	f.put("uid-b/1", now)
	f.remove("uid-b/1")
	if f.has("uid-b/1") {
		t.Error("a deleted entry is still honoured")
	}
}
