package transport

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// Files of the NATS secret directory (config/: Secret istio-aux-nats,
// mounted at NATS_SECRET_DIR). Every one is optional; credentials and keys
// live only in the Secret, never in a ConfigMap, an environment variable or
// a log line.
const (
	SecretCreds    = "creds"    // a NATS credentials file (JWT and nkey seed)
	SecretNkeySeed = "nkey"     // an nkey seed
	SecretToken    = "token"    // a token
	SecretUser     = "user"     // user name (with SecretPassword)
	SecretPassword = "password" // password
	SecretCA       = "ca.crt"   // CA bundle to verify the server (turns TLS on)
	SecretCert     = "tls.crt"  // client certificate (with SecretKey): mutual TLS
	SecretKey      = "tls.key"
)

// Security is how a connection authenticates and encrypts, read from a
// secret directory by SecurityFromDir.
type Security struct {
	opts []nats.Option
	// Using names the mechanisms in use, for a log line that shows no secret.
	Using []string
}

// SecurityFromDir reads the secret directory dir ("" or a missing or empty
// directory: no credentials, no TLS). A half-configured pair (a user
// without a password, a certificate without its key) is an error.
func SecurityFromDir(dir string) (Security, error) {
	var s Security
	if dir == "" {
		return s, nil
	}
	has := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("NATS secret %s: %w", name, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	switch {
	case has(SecretCreds):
		s.add("credentials file", nats.UserCredentials(path(SecretCreds)))
	case has(SecretNkeySeed):
		opt, err := nats.NkeyOptionFromSeed(path(SecretNkeySeed))
		if err != nil {
			return s, fmt.Errorf("NATS secret %s: %w", SecretNkeySeed, err)
		}
		s.add("nkey", opt)
	case has(SecretUser) || has(SecretPassword):
		user, err := read(SecretUser)
		if err != nil {
			return s, err
		}
		password, err := read(SecretPassword)
		if err != nil {
			return s, err
		}
		s.add("user and password", nats.UserInfo(user, password))
	default:
		// A token, read at every connection attempt: config/nats ships
		// the Secret empty and its server's first start fills it, so a
		// bridge that started first finds the token on a later attempt
		// (once the kubelet has refreshed the mounted Secret) instead of
		// needing a restart.
		if has(SecretToken) {
			if _, err := read(SecretToken); err != nil {
				return s, err
			}
			s.Using = append(s.Using, "token")
		}
		s.opts = append(s.opts, nats.TokenHandler(func() string {
			token, _ := read(SecretToken) // missing: none, and the server says so
			return token
		}))
	}
	if has(SecretCA) {
		s.add("TLS", nats.RootCAs(path(SecretCA)))
	}
	switch cert, key := has(SecretCert), has(SecretKey); {
	case cert && key:
		s.add("client certificate", nats.ClientCert(path(SecretCert), path(SecretKey)))
	case cert || key:
		return s, fmt.Errorf("NATS secret: %s and %s go together", SecretCert, SecretKey)
	}
	if _, err := os.Stat(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s, fmt.Errorf("NATS secret directory: %w", err)
	}
	return s, nil
}

func (s *Security) add(name string, o nats.Option) {
	s.opts = append(s.opts, o)
	s.Using = append(s.Using, name)
}

// Connect connects to url as name, with sec, retrying for ever in the
// background when the server is down (the pipeline waits; nothing is lost).
// Losing the connection, and every error the server reports (a refused
// credential, a permission), are warnings on logger. onReconnect, if not
// nil, runs after every reconnection.
func Connect(url, name string, sec Security, logger *zap.SugaredLogger, onReconnect func()) (*nats.Conn, error) {
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true), nats.ReconnectWait(time.Second),
		// A server whose node died answers nothing: the dialer gives up on
		// it quickly, closes a connection it stopped acknowledging, and
		// looks names up itself, falling back on their last addresses
		// (dial.go); the pings (every 2 minutes by default) come often
		// enough to notice a connection that went quiet.
		nats.SetCustomDialer(NewDialer()), nats.SkipHostLookup(),
		nats.PingInterval(10 * time.Second), nats.MaxPingsOutstanding(2),
		// A refused credential is retried like a lost connection: the
		// token may not be in the mounted Secret yet (SecurityFromDir).
		nats.IgnoreAuthErrorAbort(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			logger.Warnw("Disconnected from NATS", zap.Error(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Infow("Reconnected to NATS", zap.String("url", nc.ConnectedUrlRedacted()))
			if onReconnect != nil {
				onReconnect()
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			logger.Warnw("NATS error", zap.Error(err))
		}),
	}, sec.opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	return nc, nil
}
