package transport_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/istio-aux/istio-aux/bridge/natstoken"
	"github.com/istio-aux/istio-aux/bridge/transport"
)

// TestGeneratedTokensAreRead: natstoken.Readable says of a token exactly
// what nats-server says of it in the files config/nats and
// config/nats-single ship, with the environment 500-nats.yaml gives the
// server: it starts with the token as its clients' token and its routes'
// password, or it cannot read its configuration. Random base64url tokens,
// as natstoken generated them before it checked, are both kinds (about one
// in sixty cannot be read: nats-server exited at once, every time, and the
// install never came up).
func TestGeneratedTokensAreRead(t *testing.T) {
	files := map[string]string{"nats": transport.ConfFileOf(t, "nats"), "nats-single": transport.ConfFileOf(t, "nats-single")}
	tokens := []string{
		"-RcGe5UBsBDEIcNfUNg-SKFGLCLxzfxyPPiWyHHBusE", // a bad number
		"5-wfrnv7c9iEiebasEtHVvFa2KtHWyTJW8a5oGs9_3Q", // a bad date
		"theirs",
	}
	for range 1000 {
		raw := make([]byte, 32)
		_, _ = rand.Read(raw)
		tokens = append(tokens, base64.RawURLEncoding.EncodeToString(raw))
	}
	t.Setenv("POD_NAME", "istio-aux-nats-0")
	t.Setenv("POD_NAMESPACE", "istio-aux")
	unreadable := 0
	for _, token := range tokens {
		t.Setenv("NATS_TOKEN", token)
		for i := range 3 {
			t.Setenv(fmt.Sprintf("NATS_ROUTE_%d", i),
				fmt.Sprintf("nats://route:%s@istio-aux-nats-%d.istio-aux-nats-cluster.istio-aux.svc.cluster.local:6222", token, i))
		}
		readable := natstoken.Readable(token)
		if readable != nil {
			unreadable++
		}
		for dir, file := range files {
			opts, err := server.ProcessConfigFile(file)
			started := err == nil && opts.Authorization == token && (dir == "nats-single" || opts.Cluster.Password == token && len(opts.Routes) == 3)
			if started != (readable == nil) {
				t.Errorf("token %q in config/%s: Readable says %v, nats-server %v", token, dir, readable, err)
			}
		}
	}
	if unreadable < 2 {
		t.Errorf("%d of %d tokens unreadable: the two known bad ones should be", unreadable, len(tokens))
	}
	t.Logf("%d of %d tokens nats-server cannot read", unreadable, len(tokens))
}
