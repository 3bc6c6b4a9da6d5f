package transport

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// shippedServer starts nats-server with the configuration config/nats
// ships (its ConfigMap's nats.conf) and token as NATS_TOKEN, as the NATS pod
// gets it from Secret istio-aux-nats; only the ports and the store move to
// the test's.
func shippedServer(t *testing.T, token string) *server.Server {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "config", "nats", "300-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, []byte(cm.Data["nats.conf"]), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_TOKEN", token)
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("the shipped nats.conf: %v", err)
	}
	if !opts.JetStream || opts.Authorization != token || opts.Cluster.Port != 0 || opts.LeafNode.Port != 0 {
		t.Fatalf("the shipped nats.conf: JetStream %v, token set %v, cluster port %d, leafnode port %d",
			opts.JetStream, opts.Authorization == token, opts.Cluster.Port, opts.LeafNode.Port)
	}
	opts.Host, opts.Port, opts.HTTPPort, opts.StoreDir = "127.0.0.1", -1, 0, t.TempDir()
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return srv
}

// secretDir is a mounted Secret istio-aux-nats holding files.
func secretDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func connected(t *testing.T, nc *nats.Conn, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for !nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling the state, with a deadline
	}
	return nc.IsConnected()
}

// TestRow3AttackerIsRefused is row 3 of the README's attacks, against the
// NATS config/nats installs: a pod connects and pulls from the dispatchers'
// durable consumer. Without the token, or with a wrong one, the server
// refuses the connection ("Authorization Violation") before any subject or
// JetStream API is reached; the bridge, with the Secret's token, publishes,
// and the event is still there for the dispatchers.
func TestRow3AttackerIsRefused(t *testing.T) {
	const token = "Xq3-the-generated-token-of-secret-istio-aux"
	srv := shippedServer(t, token)
	url := srv.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	sec, err := SecurityFromDir(secretDir(t, map[string]string{SecretToken: token + "\n"}))
	if err != nil {
		t.Fatal(err)
	}
	bridge, err := Connect(url, "istio-aux-bridge", sec, zaptest.NewLogger(t).Sugar(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bridge.Close()
	if !connected(t, bridge, 5*time.Second) {
		t.Fatalf("the bridge, with the Secret's token, is not connected: %v", bridge.LastError())
	}
	js, err := jetstream.New(bridge)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(ctx, js, DefaultName); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureConsumer(ctx, js, DefaultName, DefaultConsumerOptions()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, Subject("jobs", "mnist-0"), []byte("a quit event")); err != nil {
		t.Fatal(err)
	}

	for name, opts := range map[string][]nats.Option{
		"no credentials": nil,
		"a wrong token":  {nats.Token("guessed")},
		"a user name":    {nats.UserInfo("istio-aux", token)},
	} {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			nc.Close()
			t.Fatalf("%s: connected", name)
		}
		if !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			t.Errorf("%s: %v, want an authorization violation", name, err)
		}
	}

	// Nothing was taken: the dispatchers' consumer still has the event.
	cons, err := js.Consumer(ctx, DefaultName, Durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 1 || info.NumAckPending != 0 {
		t.Errorf("consumer: %d pending, %d ack pending; want the event untouched", info.NumPending, info.NumAckPending)
	}
}

// TestTokenFilledAfterStart: a bridge that starts before the NATS pod has
// filled the Secret (config/nats ships it empty) is refused, keeps trying,
// and connects once the token is in the mounted directory: no restart.
func TestTokenFilledAfterStart(t *testing.T) {
	const token = "filled-by-the-init-container"
	srv := shippedServer(t, token)
	dir := secretDir(t, nil)
	sec, err := SecurityFromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := Connect(srv.ClientURL(), "istio-aux-bridge", sec, zaptest.NewLogger(t).Sugar(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if connected(t, nc, 300*time.Millisecond) {
		t.Fatal("connected without a token")
	}
	if err := os.WriteFile(filepath.Join(dir, SecretToken), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if !connected(t, nc, 10*time.Second) {
		t.Fatalf("not connected after the token appeared: %v (closed: %v)", nc.LastError(), nc.IsClosed())
	}
}
