package transport

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/istio-aux/istio-aux/bridge/final"
)

// TestShippedClusterLosesAServer: on config/nats's three servers, the
// bridge's stream, the dispatchers' consumer and the bucket of final
// failures keep three copies; with the stream's leader gone, an event
// published before is still delivered, and publishing goes on at once on
// the two left.
func TestShippedClusterLosesAServer(t *testing.T) {
	const token = "the-generated-token"
	srvs := shippedCluster(t, token, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.ClientURL())
	}
	js := bridgeJS(t, strings.Join(urls, ","), token)
	if got := Replicas(js); got != 3 {
		t.Fatalf("Replicas = %d on a cluster, want 3", got)
	}
	stream, err := Ensure(ctx, js, DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := EnsureConsumer(ctx, js, DefaultName, DefaultConsumerOptions())
	if err != nil {
		t.Fatal(err)
	}
	kv, err := final.Ensure(ctx, js, Replicas(js))
	if err != nil {
		t.Fatal(err)
	}
	kvStatus, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cinfo, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := stream.CachedInfo().Config.Replicas; r != 3 || kvStatus.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != 3 ||
		len(cinfo.Cluster.Replicas) != 2 {
		t.Fatalf("replicas: stream %d, bucket %d, consumer's followers %d; want 3, 3, 2",
			r, kvStatus.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas, len(cinfo.Cluster.Replicas))
	}
	if _, err := js.Publish(ctx, Subject("jobs", "before"), []byte("published before the loss")); err != nil {
		t.Fatal(err)
	}

	// The stream's leader goes, as with its node.
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var gone *server.Server
	for _, s := range srvs {
		if s.Name() == info.Cluster.Leader {
			gone = s
		}
	}
	if gone == nil {
		t.Fatalf("no server is the stream's leader %q", info.Cluster.Leader)
	}
	lost := time.Now()
	gone.Shutdown()

	// Publishing resumes once a new leader is elected: a retry, as the
	// bridge's work queue retries, with the same dedup id.
	var published time.Time
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, err := js.Publish(pctx, Subject("jobs", "after"), []byte("published after the loss"), jetstream.WithMsgID("after"))
		pcancel()
		if err == nil {
			published = time.Now()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no publish succeeded after the stream's leader went: %v", err)
		}
	}
	t.Logf("published again %v after the stream's leader went", published.Sub(lost).Round(time.Millisecond))
	got := map[string]bool{}
	for len(got) < 2 {
		batch, err := cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			got[msg.Subject()] = true
			if err := msg.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("delivered %v, want both events", got)
		}
	}
}

// TestShippedClusterRefusesAStranger: a nats-server started from the same
// configuration but without the token (a pod that points its routes at
// istio-aux's servers) is refused as a route: it joins nothing, sees no
// event, and the cluster does not count it.
func TestShippedClusterRefusesAStranger(t *testing.T) {
	srvs := shippedCluster(t, "the-generated-token", 3)
	t.Setenv("NATS_TOKEN", "guessed")
	for i, s := range srvs {
		t.Setenv(fmt.Sprintf("NATS_ROUTE_%d", i), fmt.Sprintf("nats://route:guessed@%s", s.ClusterAddr()))
	}
	t.Setenv("POD_NAME", "stranger")
	opts, err := server.ProcessConfigFile(shippedConfFile(t))
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.HTTPPort, opts.StoreDir = "127.0.0.1", -1, 0, t.TempDir()
	opts.Cluster.Host, opts.Cluster.Port, opts.PidFile = "127.0.0.1", -1, ""
	opts.NoLog, opts.NoSigs = true, true
	stranger, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	stranger.Start()
	defer stranger.Shutdown()
	// Refused routes are retried every second: over three seconds, none
	// may take. The servers' side is what counts: the stranger's own
	// count includes, under load, the route it dialled for the moment
	// before the server's refusal arrives.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range srvs {
			rz, err := s.Routez(&server.RoutezOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rz.Routes {
				if r.RemoteName == "stranger" {
					t.Fatalf("%s has a route to the stranger", s.Name())
				}
			}
		}
		time.Sleep(50 * time.Millisecond) // checking, over the period, that nothing changes
	}
}

// TestSingleServerIsTheClusterAlone: config/nats-single's server is
// config/nats's but for the cluster block: the same clients, credential,
// store and fsync policy; alone, it serves JetStream, and the bridge keeps
// one copy of its stream there.
func TestSingleServerIsTheClusterAlone(t *testing.T) {
	const token = "the-generated-token"
	t.Setenv("NATS_TOKEN", token)
	t.Setenv("POD_NAME", "istio-aux-nats-0")
	for i := range 3 {
		t.Setenv(fmt.Sprintf("NATS_ROUTE_%d", i), fmt.Sprintf("nats://route:%s@istio-aux-nats-%d:6222", token, i))
	}
	cluster, err := server.ProcessConfigFile(shippedConfFile(t))
	if err != nil {
		t.Fatal(err)
	}
	single, err := server.ProcessConfigFile(confFileOf(t, "nats-single"))
	if err != nil {
		t.Fatal(err)
	}
	if single.Cluster.Port != 0 || len(single.Routes) != 0 {
		t.Fatalf("the single server has a cluster port %d and %d routes", single.Cluster.Port, len(single.Routes))
	}
	// Everything else that configures a server is the cluster's.
	if diff := cmp.Diff(serverSettings(cluster), serverSettings(single)); diff != "" {
		t.Errorf("config/nats-single's server differs from config/nats's but for the cluster (-cluster +single):\n%s", diff)
	}

	single.Host, single.Port, single.HTTPPort, single.StoreDir = "127.0.0.1", -1, 0, t.TempDir()
	single.PidFile, single.NoLog, single.NoSigs = "", true, true
	srv, err := server.NewServer(single)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("not ready")
	}
	js := bridgeJS(t, srv.ClientURL(), token)
	if got := Replicas(js); got != 1 {
		t.Fatalf("Replicas = %d on a server alone, want 1", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := Ensure(ctx, js, DefaultName); err != nil {
		t.Fatal(err)
	}
}

// settings are what nats.conf sets of a server, but its cluster.
type settings struct {
	Name, Token, StoreDir, PidFile                 string
	Port, HTTPPort, Leaf, Gateway, WebSocket, MQTT int
	MaxPayload                                     int32
	JetStream, SyncAlways                          bool
	MaxMemory, MaxStore                            int64
	LameDuck, LameDuckGrace, SyncInterval          time.Duration
}

func serverSettings(o *server.Options) settings {
	return settings{o.ServerName, o.Authorization, o.StoreDir, o.PidFile,
		o.Port, o.HTTPPort, o.LeafNode.Port, o.Gateway.Port, o.Websocket.Port, o.MQTT.Port,
		o.MaxPayload, o.JetStream, o.SyncAlways, o.JetStreamMaxMemory, o.JetStreamMaxStore,
		o.LameDuckDuration, o.LameDuckGracePeriod, o.SyncInterval}
}
