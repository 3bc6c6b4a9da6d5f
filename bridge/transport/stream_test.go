package transport_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/istio-aux/istio-aux/bridge/transport"
)

func TestEnsureIsIdempotent(t *testing.T) {
	srv, err := transport.StartEmbedded(transport.EmbeddedOptions{StoreDir: t.TempDir()})
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
		s, err := transport.Ensure(ctx, js, "ISTIO_AUX")
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		if cfg.Retention != jetstream.WorkQueuePolicy || cfg.Duplicates != transport.DuplicateWindow ||
			cfg.Subjects[0] != "istio-aux.pods.>" || cfg.MaxAge != transport.MaxAge {
			t.Errorf("stream config %+v", cfg)
		}
		c, err := transport.EnsureConsumer(ctx, js, "ISTIO_AUX", transport.DefaultConsumerOptions())
		if err != nil {
			t.Fatal(err)
		}
		cc := c.CachedInfo().Config
		if cc.Durable != transport.Durable || cc.AckPolicy != jetstream.AckExplicitPolicy || cc.MaxAckPending != 64 || cc.MaxDeliver != 10 {
			t.Errorf("consumer config %+v", cc)
		}
	}
	if transport.DuplicateWindow >= 5*time.Minute {
		t.Error("the dedup window must stay below the default 5m resync")
	}
	if got := transport.Subject("jobs", "mnist-0"); got != "istio-aux.pods.jobs.mnist-0" {
		t.Errorf("Subject = %q", got)
	}
}

func TestEmbeddedNeedsStoreDir(t *testing.T) {
	if _, err := transport.StartEmbedded(transport.EmbeddedOptions{}); err == nil {
		t.Error("started without a store dir")
	}
}
