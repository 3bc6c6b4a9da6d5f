package final

import (
	"testing"
	"time"
)

// TestFinalsExpire: a final failure is honoured for For (the
// bucket's TTL), after which the pod is tried once more.
func TestFinalsExpire(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := NewMirror()
	f.now = func() time.Time { return now }
	f.put("uid-a/1", now)
	if !f.Has("uid-a/1") || f.Has("uid-a/2") {
		t.Fatal("has() does not follow put()")
	}
	now = now.Add(For - time.Second)
	if !f.Has("uid-a/1") {
		t.Error("forgotten before For")
	}
	now = now.Add(time.Second)
	if f.Has("uid-a/1") {
		t.Error("still honoured after For")
	}
	f.put("uid-b/1", now)
	f.remove("uid-b/1")
	if f.Has("uid-b/1") {
		t.Error("a deleted entry is still honoured")
	}
}
