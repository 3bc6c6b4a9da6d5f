package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/publish"
	"github.com/istio-aux/istio-aux/bridge/stream"
	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/functions/decision"
	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/internal/kube"
)

// maxPending bounds unacknowledged publishes per bridge.
const maxPending = 256

// Run runs the components of cfg.Role until ctx is done. If listening is
// not nil it receives the metrics/health address once it listens (tests).
func Run(ctx context.Context, cfg Config, listening chan<- net.Addr) error {
	logger := logging.FromContext(ctx)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	url := cfg.NATSURL
	if url == "" {
		srv, err := stream.StartEmbedded(stream.EmbeddedOptions{StoreDir: cfg.DataDir})
		if err != nil {
			return err
		}
		defer srv.Shutdown() // after the connection below closes
		url = srv.URL()
		logger.Infow("Started embedded nats-server", zap.String("url", url), zap.String("store", cfg.DataDir))
	}
	nc, err := nats.Connect(url, nats.Name("istio-aux-"+string(cfg.Role)), nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true), nats.ReconnectWait(time.Second))
	if err != nil {
		return fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	defer nc.Close()
	js, err := publish.NewJetStream(nc, maxPending)
	if err != nil {
		return err
	}
	if _, err := stream.Ensure(ctx, js, cfg.Stream); err != nil {
		return err
	}

	var rc *rest.Config
	if cfg.Role.Watches() || (cfg.Role.Dispatches() && cfg.Sink == "") {
		if rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			return fmt.Errorf("kubernetes client config: %w", err)
		}
	}

	g, ctx := errgroup.WithContext(ctx)
	ready := []func() bool{nc.IsConnected}
	if cfg.Role.Watches() {
		w, pub, err := newWatcher(cfg, rc, nc, js, reg)
		if err != nil {
			return err
		}
		ready = append(ready, w.Synced)
		g.Go(func() error { return pub.Run(ctx) })
		g.Go(func() error { return w.Run(ctx) })
	}
	if cfg.Role.Dispatches() {
		sink, err := newSink(ctx, cfg, rc, reg)
		if err != nil {
			return err
		}
		d := dispatch.New(js, sink, metrics.NewDispatch(reg), dispatch.Options{
			Stream: cfg.Stream, Consumer: stream.DefaultConsumerOptions()})
		ready = append(ready, d.Running)
		g.Go(func() error { return d.Run(ctx) })
	}
	g.Go(func() error { return serve(ctx, cfg.MetricsAddr, reg, ready, listening) })
	return g.Wait()
}

func newWatcher(cfg Config, rc *rest.Config, nc *nats.Conn, js jetstream.JetStream, reg prometheus.Registerer) (*watch.Watcher, *publish.Publisher, error) {
	// Pods and namespaces come as protobuf (internal/kube): every pod
	// update is decoded in full before the transform slims it, and protobuf
	// decodes in a fraction of JSON's CPU and garbage.
	client, err := kube.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	var rec *publish.Recorder
	if cfg.RecordDir != "" {
		if rec, err = publish.NewRecorder(cfg.RecordDir); err != nil {
			return nil, nil, err
		}
	}
	source := cfg.ClusterName
	if source == "" {
		source = rc.Host
	}
	m := metrics.NewBridge(reg)
	pub := publish.New(nc, js, m, rec, maxPending)
	lists := watch.Lists{Pods: client.PodListWatch(watch.PodFieldSelector), Namespaces: client.NamespaceListWatch()}
	w := watch.New(lists, pub, m, watch.Options{
		Source: source, Mode: cfg.Publish, Resync: cfg.Resync,
		Decision: decision.Options{ExtraSidecars: cfg.Function.Sidecars},
	})
	return w, pub, nil
}

// newSink is the HTTP sink for K_SINK, else the function in-process.
func newSink(ctx context.Context, cfg Config, rc *rest.Config, reg prometheus.Registerer) (dispatch.Sink, error) {
	if cfg.Sink != "" {
		return dispatch.NewHTTPSink(cfg.Sink, cfg.SinkTimeout)
	}
	fn, err := proxyquit.NewFromConfig(ctx, rc, cfg.Function, reg)
	if err != nil {
		return nil, fmt.Errorf("in-process proxy-quit function: %w", err)
	}
	return dispatch.SinkFunc(fn.Handle), nil
}

// serve exposes /metrics, /healthz (the process runs) and /readyz (caches
// synced, consumer running, NATS connected).
func serve(ctx context.Context, addr string, g prometheus.Gatherer, ready []func() bool, listening chan<- net.Addr) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		for _, r := range ready {
			if !r() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	if listening != nil {
		listening <- l.Addr()
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
