package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/watch"
)

func TestMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    int64
	}{{"268435456\n", 256 << 20}, {"max\n", 0}, {"", 0}} {
		path := filepath.Join(dir, "memory.max")
		if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := memoryLimit(path); got != tc.want {
			t.Errorf("memoryLimit(%q) = %d, want %d", tc.content, got, tc.want)
		}
	}
	if got := memoryLimit(filepath.Join(dir, "absent")); got != 0 {
		t.Errorf("memoryLimit(absent) = %d, want 0", got)
	}
}

// TestRefusalsRetry: a watcher that refuses is counted, recorded as a
// Warning Event on the bridge's pod and run again after the back-off; once
// it runs, the gauge is back to 0.
func TestRefusalsRetry(t *testing.T) {
	m := metrics.NewBridge(nil)
	rec := record.NewFakeRecorder(10)
	r := refusals{m: m, recorder: rec, first: time.Millisecond,
		pod: &corev1.ObjectReference{Kind: "Pod", Namespace: "istio-aux", Name: "istio-aux-bridge-a"}}
	terms := 0
	var during float64
	err := r.run(context.Background(), func(context.Context) error {
		terms++
		if terms < 3 {
			return &watch.CapacityError{Pods: 11, Capacity: 10}
		}
		during = testutil.ToFloat64(m.OverCapacity)
		return nil
	})
	if err != nil || terms != 3 {
		t.Fatalf("run = %v after %d terms, want nil after 3", err, terms)
	}
	if during != 1 || testutil.ToFloat64(m.OverCapacity) != 0 {
		t.Errorf("over-capacity gauge %v while refusing, %v after; want 1, 0", during, testutil.ToFloat64(m.OverCapacity))
	}
	if n := len(rec.Events); n != 2 {
		t.Fatalf("%d Events, want 2", n)
	}
	if e := <-rec.Events; !strings.HasPrefix(e, "Warning "+ReasonOverCapacity) || !strings.Contains(e, "more than 10 pods") {
		t.Errorf("Event %q", e)
	}
}
