package transport_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/istio-aux/istio-aux/bridge/transport"
)

func TestEnsureIsIdempotent(t *testing.T) {
	srv, err := transport.StartEmbedded(transport.EmbeddedOptions{StoreDir: t.TempDir(), Port: -1})
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
			cfg.Subjects[0] != "istio-aux.pods.>" || cfg.Subjects[1] != "istio-aux.retry.>" || !cfg.AllowMsgSchedules ||
			cfg.MaxAge != transport.MaxAge {
			t.Errorf("stream config %+v", cfg)
		}
		c, err := transport.EnsureConsumer(ctx, js, "ISTIO_AUX", transport.DefaultConsumerOptions())
		if err != nil {
			t.Fatal(err)
		}
		cc := c.CachedInfo().Config
		if cc.Durable != transport.Durable || cc.AckPolicy != jetstream.AckExplicitPolicy || cc.MaxAckPending != 1024 || cc.MaxDeliver != 10 {
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

func TestParseSubject(t *testing.T) {
	for subject, want := range map[string][3]string{
		"istio-aux.pods.jobs.mnist-0":   {"jobs", "mnist-0", "true"},
		"istio-aux.pods.jobs.a.b.c":     {"jobs", "a.b.c", "true"},
		"istio-aux.pods.jobs":           {"", "", "false"},
		"istio-aux.pods..x":             {"", "", "false"},
		"istio-aux.retry.jobs.mnist-0":  {"", "", "false"},
		transport.Subject("ns", "name"): {"ns", "name", "true"},
	} {
		ns, name, ok := transport.ParseSubject(subject)
		if got := [3]string{ns, name, fmt.Sprint(ok)}; got != want {
			t.Errorf("ParseSubject(%q) = %v, want %v", subject, got, want)
		}
	}
}

func TestEmbeddedNeedsStoreDir(t *testing.T) {
	if _, err := transport.StartEmbedded(transport.EmbeddedOptions{}); err == nil {
		t.Error("started without a store dir")
	}
}
