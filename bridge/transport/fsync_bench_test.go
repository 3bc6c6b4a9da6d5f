package transport

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkPublishFsync measures what `sync_interval: always`
// (config/nats) costs the bridge: one event published and acknowledged at
// a time, as the bridge publishes a pod that finished, against a server
// that fsyncs every write before acknowledging it, and one that fsyncs
// every 2 minutes (nats-server's default). make bench reports the ratio.
func BenchmarkPublishFsync(b *testing.B) {
	for _, always := range []bool{false, true} {
		name := map[bool]string{false: "default", true: "always"}[always]
		b.Run(name, func(b *testing.B) {
			srv, err := server.NewServer(&server.Options{
				Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: b.TempDir(),
				SyncAlways: always, NoLog: true, NoSigs: true,
			})
			if err != nil {
				b.Fatal(err)
			}
			srv.Start()
			defer srv.Shutdown()
			if !srv.ReadyForConnections(10 * time.Second) {
				b.Fatal("not ready")
			}
			nc, err := nats.Connect(srv.ClientURL())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if _, err := Ensure(ctx, js, DefaultName); err != nil {
				b.Fatal(err)
			}
			event := make([]byte, 2048) // about a slim pod's event
			b.ResetTimer()
			for i := range b.N {
				// A pod's subject each, as the bridge publishes them.
				if _, err := js.Publish(ctx, Subject("jobs", fmt.Sprintf("pod-%d", i)), event); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
