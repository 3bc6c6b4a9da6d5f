package transport

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"
)

// TestEmbeddedListensNowhere: the all-in-one's nats-server (Port 0) opens
// no socket, so nothing outside the process can connect to it, and the
// process itself reaches it in-process.
func TestEmbeddedListensNowhere(t *testing.T) {
	e, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	if addr := e.srv.Addr(); addr != nil {
		t.Fatalf("the embedded server listens on %v", addr)
	}
	if e.srv.ClusterAddr() != nil || e.srv.MonitorAddr() != nil {
		t.Fatal("the embedded server opened a cluster or monitoring port")
	}
	nc, err := Connect(e.URL(), "test", e.Security(), zaptest.NewLogger(t).Sugar(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling the connection state, with a deadline
	}
	if !nc.IsConnected() {
		t.Fatalf("no in-process connection: %v", nc.LastError())
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Ensure(ctx, js, DefaultName); err != nil {
		t.Fatalf("JetStream over the in-process connection: %v", err)
	}
}
