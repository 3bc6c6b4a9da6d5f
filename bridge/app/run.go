package app

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/publish"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/internal/kube"
	"github.com/istio-aux/istio-aux/internal/serving"
	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/internal/version"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// maxPending bounds unacknowledged publishes per bridge.
const maxPending = 256

// The watcher's client rate limit, unless the client configuration sets
// one (newWatcher).
const (
	watchQPS   = 100
	watchBurst = 200
)

// NewSink builds the dispatcher's sink once the process has its Kubernetes
// client configuration (nil when the role needs none) and its metrics
// registry.
type NewSink func(ctx context.Context, rc *rest.Config, reg prometheus.Registerer) (dispatch.Sink, error)

// SettingsSink is a sink that takes the process's settings (the
// all-in-one's in-process function): Run gives it those in force when it
// is built and every change of config-istio-aux after, from the process's
// one follower.
type SettingsSink interface {
	dispatch.Sink
	SetSettings(settings.Settings)
}

// HTTPSink is the bridge binary's sink: events POSTed in binary mode to
// cfg.Sink (K_SINK), each within cfg.SinkTimeout; with cfg.SinkEndpoints,
// to the function's ready pods themselves first (dispatch.DirectSink).
func HTTPSink(cfg Config) NewSink {
	return func(ctx context.Context, rc *rest.Config, reg prometheus.Registerer) (dispatch.Sink, error) {
		if cfg.Sink == "" {
			return nil, ErrNoSink
		}
		sink, err := dispatch.NewHTTPSink(cfg.Sink, cfg.SinkTimeout, cfg.SinkTokenFile)
		if err != nil || cfg.SinkEndpoints == "" {
			return sink, err
		}
		if rc == nil {
			return nil, fmt.Errorf("ISTIO_AUX_SINK_ENDPOINTS needs a Kubernetes client configuration (in-cluster or KUBECONFIG)")
		}
		cs, err := kubernetes.NewForConfig(rest.CopyConfig(rc))
		if err != nil {
			return nil, err
		}
		eps := dispatch.NewEndpoints()
		direct, err := dispatch.NewDirectSink(ctx, eps, sink, cfg.SinkTimeout, cfg.SinkTokenFile, metrics.NewDirect(reg))
		if err != nil {
			return nil, err
		}
		if err := dispatch.WatchEndpoints(ctx, cs, cfg.SystemNamespace, cfg.SinkEndpoints, eps); err != nil {
			return nil, err
		}
		logging.FromContext(ctx).Infow("Delivering to the function's ready pods, through K_SINK when none is",
			zap.String("endpointslices", cfg.SinkEndpoints), zap.String("namespace", cfg.SystemNamespace))
		return direct, nil
	}
}

// RESTConfig is the Kubernetes client configuration of cfg (KUBECONFIG, or
// in-cluster), or nil when there is none and the role needs none (a
// dispatcher delivering over HTTP).
func RESTConfig(cfg Config) (*rest.Config, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		if cfg.Role.Watches() {
			return nil, fmt.Errorf("kubernetes client config: %w", err)
		}
		return nil, nil
	}
	return rc, nil
}

// Run runs the components of cfg.Role until ctx is done, with the
// Kubernetes client configuration rc (RESTConfig), delivering events to the
// sink newSink builds (when the role dispatches).
func Run(ctx context.Context, cfg Config, rc *rest.Config, newSink NewSink) error {
	return run(ctx, cfg, rc, newSink, nil)
}

// run is Run, telling listening (tests) the metrics/health address once it
// listens.
func run(ctx context.Context, cfg Config, rc *rest.Config, newSink NewSink, listening chan<- net.Addr) error {
	logger := logging.FromContext(ctx)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	version.Register(reg, "bridge-"+string(cfg.Role))

	url := cfg.NATSURL
	var sec transport.Security
	var js jetstream.JetStream
	if url == "" {
		// It listens nowhere: reached in-process only (sec).
		srv, err := transport.StartEmbedded(transport.EmbeddedOptions{StoreDir: cfg.DataDir})
		if err != nil {
			return err
		}
		defer srv.Shutdown() // after the connection below closes
		url, sec = srv.URL(), srv.Security()
		logger.Infow("Started embedded nats-server", zap.String("url", url), zap.String("store", cfg.DataDir))
	} else {
		var err error
		if sec, err = transport.SecurityFromDir(cfg.NATSSecretDir); err != nil {
			return err
		}
		logger.Infow("Connecting to NATS", zap.String("url", url), zap.Strings("using", sec.Using))
	}
	// While a watcher runs, a reconnection retries at once the pods whose
	// events could not be published meanwhile, instead of each waiting out
	// its back-off (up to 30 s).
	live := newLiveSettings(cfg.Settings)
	nc, err := transport.Connect(url, "istio-aux-"+string(cfg.Role), sec, logger, func() {
		if w := live.running(); w != nil {
			go retryWhenStreamAnswers(ctx, js, cfg.Stream, w.RetryNow)
		}
	})
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err = publish.NewJetStream(nc, maxPending)
	if err != nil {
		return err
	}

	if rc == nil && cfg.Role.Watches() {
		return errors.New("the watcher needs a Kubernetes client configuration")
	}

	ctx, restart := context.WithCancelCause(ctx)
	defer restart(nil)
	// One recorder for the process's Events (settings applied or refused,
	// the watcher over capacity), where a system namespace holds them.
	// Its client (core/v1) also reads config-leader-election below.
	var recorder record.EventRecorder
	var system *kube.Client
	if rc != nil && cfg.SystemNamespace != "" {
		var err error
		if system, err = kube.NewForConfig(rc); err != nil {
			return fmt.Errorf("kubernetes client for config-istio-aux and Events: %w", err)
		}
		recorder = system.Recorder(ctx, names.SourceBridge)
		live.follow(ctx, cfg, system, recorder, restart)
	}
	g, ctx := errgroup.WithContext(ctx)
	var streamReady atomic.Bool
	g.Go(func() error { ensureStream(ctx, js, cfg.Stream, &streamReady); return nil })
	ready := []func() bool{nc.IsConnected, streamReady.Load}
	if cfg.Role.Watches() {
		client, err := watchClient(rc)
		if err != nil {
			return err
		}
		m := metrics.NewBridge(reg)
		pub := publish.New(nc, js, m, cfg.Stream, maxPending)
		g.Go(func() error { return pub.Run(ctx) })
		// Ready while standing by; while leading, once the watcher has
		// listed what it watches.
		ready = append(ready, func() bool {
			w := live.running()
			return w == nil || w.Synced()
		})
		limit := memoryLimit(cgroupMemoryMax)
		if cfg.NATSURL == "" && limit > 0 {
			// The all-in-one: its embedded nats-server and the function
			// share the container's limit.
			limit = max(1, limit-embeddedReserve)
		}
		maxPods := watch.Capacity(limit)
		m.CapacityPods.Set(float64(maxPods))
		r := refusals{m: m, first: time.Minute, recorder: recorder}
		if recorder != nil {
			r.pod = &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: cfg.SystemNamespace, Name: cfg.Election.Identity}
		}
		runWatcher := func(ctx context.Context) error {
			return r.run(ctx, func(ctx context.Context) error {
				w := live.start(func(s settings.Settings) *watch.Watcher { return newWatcher(cfg, rc, client, pub, m, s, maxPods) })
				defer live.stop()
				return w.Run(ctx)
			})
		}
		if cfg.Election.Lease == "" {
			m.Leader.Set(1)
			g.Go(func() error { return runWatcher(ctx) })
		} else {
			cms := system
			if cms == nil { // the Lease's namespace given, but no SYSTEM_NAMESPACE
				var err error
				if cms, err = kube.NewForConfig(rc); err != nil {
					return fmt.Errorf("kubernetes client for %s: %w", names.LeaderElectionConfigMap, err)
				}
			}
			var err error
			if cfg.Election, err = timingsAtStart(ctx, cfg.Election, cms); err != nil {
				return err
			}
			logger.Infow("Standing for the watcher's Lease", zap.String("lease", cfg.Election.Namespace+"/"+cfg.Election.Lease),
				zap.Duration("leaseDuration", cfg.Election.LeaseDuration), zap.Duration("renewDeadline", cfg.Election.RenewDeadline),
				zap.Duration("retryPeriod", cfg.Election.RetryPeriod))
			lock, err := lockFor(cfg.Election, rc)
			if err != nil {
				return err
			}
			g.Go(func() error {
				return runElected(ctx, cfg.Election, lock, func(leading bool) {
					m.Leader.Set(boolGauge(leading))
					if leading {
						m.LeaderTransitions.Inc()
					}
				}, runWatcher)
			})
		}
	}
	if cfg.Role.Dispatches() {
		sink, err := newSink(ctx, rc, reg)
		if err != nil {
			return err
		}
		// An in-process function follows the process's settings: one
		// follower for the bridge and the function (the all-in-one).
		if s, ok := sink.(SettingsSink); ok {
			live.subscribe(s.SetSettings)
		}
		d := dispatch.New(js, sink, metrics.NewDispatch(reg), dispatch.Options{
			Stream: cfg.Stream, Consumer: transport.DefaultConsumerOptions()})
		ready = append(ready, d.Running)
		g.Go(func() error { return d.Run(ctx) })
	}
	g.Go(func() error { return serve(ctx, cfg.MetricsAddr, cfg.Profiling, reg, ready, listening) })
	err = g.Wait()
	if cause := context.Cause(ctx); errors.Is(cause, settings.ErrRestart) {
		return cause
	}
	return err
}

// ensureStream creates or updates the stream, retrying with back-off while
// NATS is unreachable (a process exiting instead would be restarted with the
// kubelet's growing back-off, long after NATS is back). The publisher and
// the dispatcher re-create a missing stream themselves; this applies the
// configuration at start and gates readiness.
func ensureStream(ctx context.Context, js jetstream.JetStream, stream string, done *atomic.Bool) {
	logger := logging.FromContext(ctx)
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: 15 * time.Second}
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := transport.Ensure(actx, js, stream)
		cancel()
		if err == nil {
			done.Store(true)
			return
		}
		d := backoff.Step()
		logger.Warnw("Stream not ready; retrying", zap.Error(err), zap.Duration("in", d))
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

// retryWhenStreamAnswers runs retry once the stream answers again: right
// after a reconnection JetStream may still be recovering it, and a publish
// then fails anew.
func retryWhenStreamAnswers(ctx context.Context, js jetstream.JetStream, stream string, retry func()) {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := js.Stream(ctx, stream)
		return err == nil, nil
	})
	if err == nil {
		retry()
	}
}

// watchClients are the watcher's clients: internal/kube's, whose pods and
// namespaces come as protobuf (every pod update is decoded in full before
// the transform slims it, and protobuf decodes in a fraction of JSON's CPU
// and garbage), and client-go's metadata client for the sweep.
type watchClients struct {
	core     *kube.Client
	metadata metadata.Interface
}

func watchClient(rc *rest.Config) (watchClients, error) {
	wc := rest.CopyConfig(rc)
	if wc.QPS == 0 {
		// A watch per namespace holding opted-in pods without the label,
		// each a request at start and again every 5 to 10 minutes (the
		// watch timeout): client-go's default 5 QPS would take minutes to
		// start a thousand of them after an install.
		wc.QPS, wc.Burst = watchQPS, watchBurst
	}
	core, err := kube.NewForConfig(wc)
	if err != nil {
		return watchClients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	md, err := metadata.NewForConfig(wc)
	if err != nil {
		return watchClients{}, fmt.Errorf("kubernetes metadata client: %w", err)
	}
	return watchClients{core, md}, nil
}

// newWatcher is a watcher with empty caches: one for each term as leader,
// whose first lists find every pod that finished while nobody watched.
func newWatcher(cfg Config, rc *rest.Config, client watchClients, pub *publish.Publisher, m *metrics.Bridge, s settings.Settings, maxPods int) *watch.Watcher {
	source := cfg.ClusterName
	if source == "" {
		source = rc.Host
	}
	return watch.New(watch.KubeLists(client.core, client.metadata), pub, m, watch.Options{Source: source, Resync: s.Resync, Decision: s.Decision, MaxPods: maxPods})
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// serve exposes /metrics, /healthz (the process runs) and /readyz (caches
// synced, consumer running, NATS connected).
func serve(ctx context.Context, addr string, profiling bool, g prometheus.Gatherer, ready []func() bool, listening chan<- net.Addr) error {
	mux := http.NewServeMux()
	if profiling {
		// Go's profiles and execution trace, for measuring (make bench);
		// off by default.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
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
	return serving.Serve(ctx, srv, l, serving.Stop{Drain: 5 * time.Second})
}
