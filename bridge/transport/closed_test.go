package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
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

// shippedCluster starts n nats-servers with the configuration config/nats
// ships (its ConfigMap's nats.conf) and token as NATS_TOKEN, as the NATS
// pods get it from Secret istio-aux-nats: one JetStream cluster, each
// server with a route to every other, authenticated with the token as
// 500-nats.yaml's NATS_ROUTE_* give them. Only the addresses (loopback,
// free ports) and the stores move to the test's. It returns once every
// server has routes to the others.
func shippedCluster(t *testing.T, token string, n int) []*server.Server {
	t.Helper()
	conf := shippedConfFile(t)
	ports := freeTCPPorts(t, n)
	t.Setenv("NATS_TOKEN", token)
	for i := range 3 {
		// The shipped file names three routes; with fewer servers the rest
		// point at one of them (a route to itself is skipped). A server
		// alone in this shape elects no JetStream leader: one server runs
		// config/nats-single's file instead.
		t.Setenv(fmt.Sprintf("NATS_ROUTE_%d", i), fmt.Sprintf("nats://route:%s@127.0.0.1:%d", token, ports[i%n]))
	}
	var srvs []*server.Server
	for i := range n {
		t.Setenv("POD_NAME", fmt.Sprintf("istio-aux-nats-%d", i))
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("the shipped nats.conf: %v", err)
		}
		if !opts.JetStream || opts.Authorization != token || opts.Cluster.Port != 6222 || opts.Cluster.Password != token ||
			len(opts.Routes) != min(n, 3) || opts.LeafNode.Port != 0 || !opts.SyncAlways || opts.ServerName != fmt.Sprintf("istio-aux-nats-%d", i) {
			t.Fatalf("the shipped nats.conf: JetStream %v, token set %v, cluster port %d and password set %v, %d routes, leafnode port %d, sync always %v, name %q",
				opts.JetStream, opts.Authorization == token, opts.Cluster.Port, opts.Cluster.Password == token, len(opts.Routes),
				opts.LeafNode.Port, opts.SyncAlways, opts.ServerName)
		}
		opts.Host, opts.Port, opts.HTTPPort, opts.StoreDir = "127.0.0.1", -1, 0, t.TempDir()
		opts.Cluster.Host, opts.Cluster.Port, opts.PidFile = "127.0.0.1", ports[i], ""
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
		srvs = append(srvs, srv)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, srv := range srvs {
		for srv.NumRoutes() < n-1 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling the routes, with a deadline
		}
		if got := srv.NumRoutes(); got < n-1 {
			t.Fatalf("%s has %d routes, want %d", srv.Name(), got, n-1)
		}
	}
	// JetStream's API answers once the cluster has a meta leader (a request
	// before that is dropped unanswered), and places a stream of n copies
	// once that leader has every server's stats ("no suitable peers for
	// placement" before): JetStreamClusterPeers lists those, on the leader.
	ready := func(srv *server.Server) bool { return len(srv.JetStreamClusterPeers()) == n }
	for !slices.ContainsFunc(srvs, ready) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling the election, with a deadline
	}
	if !slices.ContainsFunc(srvs, ready) {
		t.Fatalf("no JetStream meta leader with the %d servers as peers", n)
	}
	return srvs
}

// shippedConfFile writes config/nats's nats.conf (its ConfigMap's) into a
// file of the test's and returns its path.
func shippedConfFile(t *testing.T) string { return confFileOf(t, "nats") }

// confFileOf writes the nats.conf of config/<dir>'s ConfigMap into a file
// of the test's and returns its path.
func confFileOf(t *testing.T, dir string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "config", dir, "300-config.yaml"))
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
	return conf
}

func freeTCPPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
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

// bridgeJS connects to url as the bridge does, with the Secret's token
// mounted, and returns its JetStream once connected.
func bridgeJS(t *testing.T, url, token string) jetstream.JetStream {
	t.Helper()
	sec, err := SecurityFromDir(secretDir(t, map[string]string{SecretToken: token + "\n"}))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := Connect(url, "istio-aux-bridge", sec, zaptest.NewLogger(t).Sugar(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if !connected(t, nc, 5*time.Second) {
		t.Fatalf("the bridge, with the Secret's token, is not connected: %v", nc.LastError())
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
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
	srvs := shippedCluster(t, token, 3)
	url := srvs[0].ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	js := bridgeJS(t, url, token)
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

	// Nothing was taken: the dispatchers' consumer still has the event. Its
	// count is the consumer leader's, which may see the stored message a
	// moment after the publish was acknowledged by a quorum of copies.
	cons, err := js.Consumer(ctx, DefaultName, Durable)
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.ConsumerInfo
	for deadline := time.Now().Add(5 * time.Second); ; {
		if info, err = cons.Info(ctx); err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 1 && info.NumAckPending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling the count, with a deadline
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
	srv := shippedCluster(t, token, 3)[0]
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
