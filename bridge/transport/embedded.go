package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Embedded is an in-process nats-server with JetStream, for running the
// whole pipeline as one binary with nothing else installed.
type Embedded struct {
	srv *server.Server
}

// EmbeddedOptions configure StartEmbedded.
type EmbeddedOptions struct {
	// StoreDir holds the JetStream file store; events survive restarts.
	StoreDir string
	// Port to listen on, on 127.0.0.1 only; -1 picks a free one.
	Port int
}

// StartEmbedded starts the server and waits until it accepts clients.
func StartEmbedded(o EmbeddedOptions) (*Embedded, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embedded nats-server needs a store directory (ISTIO_AUX_DATA_DIR)")
	}
	if o.Port == 0 {
		o.Port = -1
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "istio-aux",
		Host:       "127.0.0.1",
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("embedded nats-server did not become ready in 10s")
	}
	return &Embedded{srv: srv}, nil
}

// URL is the nats:// address clients connect to.
func (e *Embedded) URL() string { return e.srv.ClientURL() }

// Shutdown stops the server and waits until it has.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
