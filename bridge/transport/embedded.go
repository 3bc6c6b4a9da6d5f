package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Embedded is an in-process nats-server with JetStream, for running the
// whole pipeline as one binary with nothing else installed.
type Embedded struct {
	srv    *server.Server
	listen bool
}

// EmbeddedOptions configure StartEmbedded.
type EmbeddedOptions struct {
	// StoreDir holds the JetStream file store; events survive restarts.
	StoreDir string
	// Port, when not 0, makes the server listen on 127.0.0.1:Port (-1
	// picks a free port), for tests that connect from outside. With 0 (the
	// all-in-one) it listens nowhere: only this process reaches it, through
	// in-process connections (Security), so no other pod can read, take or
	// delete the events whatever the network allows.
	Port int
}

// StartEmbedded starts the server and waits until it accepts clients.
func StartEmbedded(o EmbeddedOptions) (*Embedded, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embedded nats-server needs a store directory (ISTIO_AUX_DATA_DIR)")
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "istio-aux",
		Host:       "127.0.0.1",
		Port:       o.Port,
		DontListen: o.Port == 0,
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
	return &Embedded{srv: srv, listen: o.Port != 0}, nil
}

// inProcessURL stands for the embedded server in logs and in Connect,
// which needs a URL even when it dials nothing.
const inProcessURL = "nats://in-process"

// URL is the nats:// address clients connect to: the listener's, or
// inProcessURL for a server that listens nowhere (connect with Security).
func (e *Embedded) URL() string {
	if !e.listen {
		return inProcessURL
	}
	return e.srv.ClientURL()
}

// Security connects to this server in-process, through a pipe: no socket,
// no credentials needed.
func (e *Embedded) Security() Security {
	return Security{opts: []nats.Option{nats.InProcessServer(e.srv)}, Using: []string{"in-process"}}
}

// Shutdown stops the server and waits until it has.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
