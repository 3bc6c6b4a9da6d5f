package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corelisters "k8s.io/client-go/listers/core/v1"
	"knative.dev/pkg/logging"
	"knative.dev/pkg/network/handlers"
	knativetls "knative.dev/pkg/network/tls"
	"knative.dev/pkg/system"
	knwebhook "knative.dev/pkg/webhook"
	certresources "knative.dev/pkg/webhook/certificates/resources"

	"github.com/istio-aux/istio-aux/internal/serving"
)

// Server is the webhook's HTTPS endpoint, in place of knative.dev/pkg's
// (whose handler reads the whole AdmissionReview, copies it twice and
// instruments every request before Admit runs): it holds at most
// ReviewBudget bytes of reviews at once, decodes each review once into
// what admission.Mutate reads, and answers. The rest of the process is knative's
// sharedmain: certificates, leader election, logging, configuration, the
// MutatingWebhookConfiguration's reconciler. NewController starts a Server
// found in its context (WithServer) on the port, Secret and TLS settings of
// knative's webhook.Options, and the main waits for it to drain (Wait).
type Server struct {
	started atomic.Bool
	stop    context.CancelCauseFunc // ends the process's context (WithServer)
	done    chan struct{}
	err     error
}

// NewServer returns a Server to hand to NewController through WithServer.
func NewServer() *Server { return &Server{done: make(chan struct{})} }

type serverKey struct{}

// WithServer returns ctx carrying s, for NewController to start, and ended
// if s stops on its own (it cannot listen, say), so that the process stops
// too rather than run without answering.
func WithServer(ctx context.Context, s *Server) context.Context {
	ctx, s.stop = context.WithCancelCause(ctx)
	return context.WithValue(ctx, serverKey{}, s)
}

func serverFrom(ctx context.Context) *Server {
	s, _ := ctx.Value(serverKey{}).(*Server)
	return s
}

// Wait returns once a started Server has drained and stopped after its
// context ended (at once if it never started), with the error that stopped
// it, if not that.
func (s *Server) Wait() error {
	if !s.started.Load() {
		return nil
	}
	<-s.done
	return s.err
}

// start serves h until ctx ends, then drains: it keeps answering until no
// request has come for the webhook's grace period (knative's Drainer; 45 s
// by default, which config/'s terminationGracePeriodSeconds exceeds), so
// that the API server has stopped sending before the process goes.
func (s *Server) start(ctx context.Context, h http.Handler, secrets corelisters.SecretLister) {
	s.started.Store(true)
	go func() {
		defer close(s.done)
		if s.err = s.serve(ctx, h, secrets); s.err != nil {
			logging.FromContext(ctx).Errorw("The admission server stopped", zap.Error(s.err))
			s.stop(s.err)
		}
	}()
}

func (s *Server) serve(ctx context.Context, h http.Handler, secrets corelisters.SecretLister) error {
	logger := logging.FromContext(ctx)
	opts := knwebhook.GetOptions(ctx)
	if opts == nil {
		return errors.New("the context has no knative webhook.Options")
	}
	drainer := &handlers.Drainer{Inner: h, QuietPeriod: opts.GracePeriod}
	srv := &http.Server{
		Handler: drainer,
		// Requests carry the controller's logger, not its cancellation:
		// the server answers while it drains.
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ErrorLog:          log.New(zapWriter{logger}, "", 0),
		ReadHeaderTimeout: 10 * time.Second,
		// A review holds its share of the budget while its body arrives:
		// no client may take longer than the API server's longest timeout.
		ReadTimeout: maxReviewTimeout,
		IdleTimeout: 2 * time.Minute,
	}
	if !opts.EnableHTTP2 {
		// As knative's webhook: HTTP/2's rapid reset (CVE-2023-44487).
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	ln, err := net.Listen("tcp", fmt.Sprint(":", opts.Port))
	if err != nil {
		return fmt.Errorf("admission listener: %w", err)
	}
	if opts.SecretName != "" {
		cfg, err := tlsConfig(opts, secrets)
		if err != nil {
			_ = ln.Close()
			return err
		}
		ln = tls.NewListener(ln, cfg)
	}
	logger.Infow("Serving admission", zap.String("addr", ln.Addr().String()), zap.Bool("tls", opts.SecretName != ""))
	if err := serving.Serve(ctx, srv, ln, serving.Stop{Quiet: func() {
		logger.Info("Draining the admission server")
		drainer.Drain()
	}}); err != nil {
		return fmt.Errorf("admission server: %w", err)
	}
	return nil
}

// tlsConfig is knative's webhook TLS configuration (WEBHOOK_TLS_* variables,
// TLS 1.3 at least unless set) with the certificate knative's certificates
// controller keeps in the Secret opts.SecretName.
func tlsConfig(opts *knwebhook.Options, secrets corelisters.SecretLister) (*tls.Config, error) {
	cfg, err := knativetls.DefaultConfigFromEnv("WEBHOOK_")
	if err != nil {
		return nil, fmt.Errorf("reading TLS configuration from environment: %w", err)
	}
	if opts.TLSMinVersion != 0 {
		cfg.MinVersion = opts.TLSMinVersion
	}
	keyName, certName := certresources.ServerKey, certresources.ServerCert
	if opts.ServerPrivateKeyName != "" {
		keyName = opts.ServerPrivateKeyName
	}
	if opts.ServerCertificateName != "" {
		certName = opts.ServerCertificateName
	}
	c := &secretCertificate{secrets: secrets, name: opts.SecretName, keyName: keyName, certName: certName}
	cfg.GetCertificate = c.get
	return cfg, nil
}

// secretCertificate serves the certificate in a Secret, parsed once per
// version of the Secret rather than at every handshake.
type secretCertificate struct {
	secrets                 corelisters.SecretLister
	name, keyName, certName string
	last                    atomic.Pointer[parsedCertificate]
}

type parsedCertificate struct {
	resourceVersion string
	cert            *tls.Certificate
}

func (c *secretCertificate) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	secret, err := c.secrets.Secrets(system.Namespace()).Get(c.name)
	if err != nil {
		// No certificate yet: the client sees "no certificates configured".
		return nil, nil //nolint:nilerr // tls.Config asks for nil, nil when there is none
	}
	if p := c.last.Load(); p != nil && p.resourceVersion == secret.ResourceVersion {
		return p.cert, nil
	}
	key, cert := secret.Data[c.keyName], secret.Data[c.certName]
	if len(key) == 0 || len(cert) == 0 {
		return nil, nil
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", c.name, err)
	}
	c.last.Store(&parsedCertificate{resourceVersion: secret.ResourceVersion, cert: &pair})
	return &pair, nil
}

// zapWriter sends net/http's error log (TLS handshake failures and the
// like) to the webhook's logger.
type zapWriter struct{ logger *zap.SugaredLogger }

func (z zapWriter) Write(p []byte) (int, error) {
	z.logger.Warn(string(p))
	return len(p), nil
}
