package proxyquit

import (
	"context"
	"testing"

	"k8s.io/client-go/tools/record"
)

// BenchmarkHandle measures Handle on the path that ends in a quit: decode,
// pre-check, two GETs (fake clientset), opt-in, decision, a fake exec that
// returns at once, the Kubernetes Event and the metrics.
func BenchmarkHandle(b *testing.B) {
	done := donePod("job-1", "uid-1")
	h := newHarness(b, DefaultConfig(), optedIn, done)
	h.fn.recorder = &record.FakeRecorder{} // discards; a buffered one would fill up
	e := newEvent(b, done)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if codeOf(b, h.fn.Handle(ctx, e)) != 200 {
			b.Fatal("want 200")
		}
	}
	if n := len(h.exec.Calls()); n == 0 {
		b.Fatal("the quit path was not taken")
	}
}

// BenchmarkHandleWait is the common case: an event for a pod whose apps
// still run, answered from the event alone without an API call.
func BenchmarkHandleWait(b *testing.B) {
	p := podSpec{name: "job-1", uid: "uid-1", policy: "Never", apps: []string{"app"}, proxy: running}.pod()
	p.Status.ContainerStatuses[1].State = running
	h := newHarness(b, DefaultConfig(), optedIn)
	e := newEvent(b, p)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if codeOf(b, h.fn.Handle(ctx, e)) != 200 {
			b.Fatal("want 200")
		}
	}
	if h.count(e.Type(), OutcomeWait) == 0 {
		b.Fatal("the wait path was not taken")
	}
}
