package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/istio-aux/istio-aux/bridge/stream"
)

func TestEnsureIsIdempotent(t *testing.T) {
	srv, err := stream.StartEmbedded(stream.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 { // every replica, every start
		s, err := stream.Ensure(ctx, js, "ISTIO_AUX")
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		if cfg.Retention != jetstream.WorkQueuePolicy || cfg.Duplicates != stream.DuplicateWindow ||
			cfg.Subjects[0] != "istio-aux.pods.>" || cfg.MaxAge != stream.MaxAge {
			t.Errorf("stream config %+v", cfg)
		}
		c, err := stream.EnsureConsumer(ctx, js, "ISTIO_AUX", stream.DefaultConsumerOptions())
		if err != nil {
			t.Fatal(err)
		}
		cc := c.CachedInfo().Config
		if cc.Durable != stream.Durable || cc.AckPolicy != jetstream.AckExplicitPolicy || cc.MaxAckPending != 64 || cc.MaxDeliver != 10 {
			t.Errorf("consumer config %+v", cc)
		}
	}
	if stream.DuplicateWindow >= 5*time.Minute {
		t.Error("the dedup window must stay below the default 5m resync")
	}
	if got := stream.Subject("jobs"); got != "istio-aux.pods.jobs" {
		t.Errorf("Subject = %q", got)
	}
}

func TestEmbeddedNeedsStoreDir(t *testing.T) {
	if _, err := stream.StartEmbedded(stream.EmbeddedOptions{}); err == nil {
		t.Error("started without a store dir")
	}
}
