package proxyquit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/internal/kube"
	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// apiTimeout bounds each GET: a slow API server is answered with 503 (Knative
// delivery and the dispatcher retry) rather than holding a request open.
const apiTimeout = 5 * time.Second

// The Kubernetes client's rate limit when the caller's rest.Config sets none.
const (
	clientQPS   = 50
	clientBurst = 100
)

// Function is the proxy-quit CloudEvent function. It holds no state between
// events; every field is a dependency or configuration.
type Function struct {
	cfg Config
	// live is what config-istio-aux says now: the decision's options and
	// the quit command (SetSettings).
	live     atomic.Pointer[settings.Settings] // each handled event reads one change whole
	auth     *authenticator
	cluster  Cluster
	exec     Execer
	recorder record.EventRecorder
	events   *eventLog // nil when the recorder was handed to New
	metrics  *Metrics
	now      func() time.Time
	// eventTimeout bounds the write of a quit's Event (record), and
	// exitWait how long a failed exec's pod is watched for its proxy to
	// stop (proxyGone).
	eventTimeout, exitWait time.Duration
}

// Close waits for the Kubernetes Events still being written, at most
// closeTimeout (each one left is counted and logged, and a warning on
// ctx's logger says how many), and stops writing. A quit's Events are
// written before its request is answered (its ProxyQuit before its
// exec); what Close waits for are the writes of requests the drain cut
// off and the settings' Events. Call it once the events under way have
// been handled (the HTTP server shut down, the dispatcher drained), with
// the process's context, done or not.
func (f *Function) Close(ctx context.Context) {
	if f.events == nil {
		return
	}
	closing, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	if err := f.events.flush(closing); err != nil {
		logging.FromContext(ctx).Warnw("Stopping", zap.Error(err))
	}
}

// closeTimeout bounds Close: after the 20 s drain of the HTTP server or the
// dispatcher, inside a pod's default 30 s of grace.
const closeTimeout = 5 * time.Second

// eventTimeout bounds the write of a quit's Event, tries included: long
// enough to ride out an API server restarting or an etcd election (a few
// seconds), short enough that the request, with its exec (10 s) and
// reads, stays within the dispatcher's and Knative's 30 s. It bounds the
// ProxyQuit Event written before the exec, and, after a failed exec, its
// delete and the ProxyQuitFailed together; the first is a write or two
// unless the API server is failing, and then the caller's 30 s may end
// first: it delivers the event again.
const eventTimeout = 10 * time.Second

// New assembles a Function from its dependencies. metrics may be nil (not
// exported anywhere); the others are required.
func New(cfg Config, cluster Cluster, exec Execer, recorder record.EventRecorder, metrics *Metrics) (*Function, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("proxyquit config: %w", err)
	}
	if cluster == nil || exec == nil || recorder == nil {
		return nil, errors.New("proxyquit: cluster, execer and event recorder are required")
	}
	if metrics == nil {
		metrics, _ = NewMetrics(nil) // cannot fail without a registry
	}
	reviewer, _ := cluster.(Reviewer)
	f := &Function{cfg: cfg, auth: newAuthenticator(cfg.Auth, reviewer, metrics), cluster: cluster, exec: exec,
		recorder: recorder, metrics: metrics, now: time.Now, eventTimeout: eventTimeout, exitWait: exitWait}
	f.live.Store(&cfg.Settings)
	return f, nil
}

// SetSettings applies a change of config-istio-aux to the events handled
// from now on (settings.Follower's Apply; in the all-in-one, the process's
// one follower's).
func (f *Function) SetSettings(s settings.Settings) { f.live.Store(&s) }

// NewFromConfig builds a Function talking to the cluster rc points at, with
// metrics registered on reg (nil: not registered). Kubernetes Events are
// written until Close.
func NewFromConfig(ctx context.Context, rc *rest.Config, cfg Config, reg prometheus.Registerer) (*Function, error) {
	if rc == nil {
		return nil, errors.New("proxyquit: no Kubernetes client configuration")
	}
	rc = rest.CopyConfig(rc)
	if rc.QPS == 0 {
		// client-go's default (5 QPS, burst 10) allows about two quits a
		// second (each reads the pod and its namespace and writes an Event):
		// a burst of finishing Jobs then queues behind the rate limiter and
		// comes back as 503s and redeliveries. These limits fit one replica
		// at its containerConcurrency (config/600-proxyquit-ksvc.yaml).
		rc.QPS, rc.Burst = clientQPS, clientBurst
	}
	// internal/kube: core/v1 only, protobuf (less CPU on both ends of
	// every quit than JSON).
	kc, err := kube.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	ex, err := NewRemoteExecer(rc)
	if err != nil {
		return nil, err
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	// Events go through a client of their own, whose rate limit (its own
	// token bucket, with the reads' limits) is theirs: a quit's Event never
	// waits behind the pod and namespace reads that hundreds of deliveries
	// under way queue, and never spends their budget. Its limits are no
	// bound to lift: a quit writes one Event, and quits are execs, which
	// have a client and the same limits of their own (NewRemoteExecer).
	erc := rest.CopyConfig(rc)
	erc.RateLimiter = nil
	ec, err := kube.NewForConfig(erc)
	if err != nil {
		return nil, fmt.Errorf("creating the events client: %w", err)
	}
	// Events are written until Close, not until ctx is done: the events
	// under way when the process is told to stop still get theirs.
	events := newEventLog(apiEventSink{ec.RESTClient()}, kube.Scheme)
	events.lost = unwrittenEvent(logging.FromContext(ctx), m)
	// Token reviews and the issuer's keys go through a client of their
	// own: its rate limit is theirs, so authentication can never spend the
	// budget of the pod reads and the Events (and callers cannot spend this
	// one at will: the keys are read on a timer, and only tokens signed by
	// the cluster, of allowed callers, are reviewed).
	arc := rest.CopyConfig(rc)
	arc.QPS, arc.Burst, arc.RateLimiter = authQPS, authBurst, nil
	ac, err := kube.NewForConfig(arc)
	if err != nil {
		return nil, fmt.Errorf("creating the authentication client: %w", err)
	}
	fn, err := New(cfg, reviewedApart{Cluster: NewNamespaceCache(kc), reviews: APIServerReviewer(ac.RESTClient())}, ex, events, m)
	if err != nil {
		events.stop()
		return nil, err
	}
	fn.events = events
	if cfg.SystemNamespace != "" {
		follower := &settings.Follower{Component: names.SourceProxyQuit, Base: cfg.Settings, Apply: fn.SetSettings, Recorder: events}
		follower.Follow(ctx, kc, cfg.SystemNamespace)
	}
	if !cfg.Auth.Disabled {
		go fn.auth.keys.follow(ctx, APIServerIssuer(ac.RESTClient()))
	}
	return fn, nil
}

// The authentication client's rate limit: a review per new dispatcher
// token and per reviewTTL, two reads of the keys a minute.
const (
	authQPS   = 5
	authBurst = 10
)

// reviewedApart is a Cluster whose token reviews go to a client of their own.
type reviewedApart struct {
	Cluster
	reviews Reviewer
}

func (c reviewedApart) Review(ctx context.Context, token string, audiences []string) (authenticationv1.TokenReviewStatus, error) {
	return c.reviews.Review(ctx, token, audiences)
}

// Handle is the CloudEvents entry point. Its result carries an HTTP status
// for Knative delivery and the dispatcher: 2xx done, 400 never retry, 5xx
// retry. Read it with cloudevents.ResultAs(res, &*cehttp.Result).
func (f *Function) Handle(ctx context.Context, e cloudevents.Event) cloudevents.Result {
	r := f.handleAndLog(ctx, e)
	if r.err != nil {
		return cehttp.NewResult(r.code, "%s: %s: %w", r.outcome, r.detail, r.err)
	}
	return cehttp.NewResult(r.code, "%s: %s", r.outcome, r.detail)
}

// handleAndLog handles one event, counts and logs its outcome.
func (f *Function) handleAndLog(ctx context.Context, e cloudevents.Event) result {
	r := f.handle(ctx, e)
	f.metrics.events.WithLabelValues(typeLabel(e.Type()), string(r.outcome)).Inc()

	log := logging.FromContext(ctx).With(zap.String("id", e.ID()), zap.String("subject", e.Subject()),
		zap.String("outcome", string(r.outcome)), zap.Int("code", r.code))
	switch {
	case r.err != nil && r.code >= http.StatusInternalServerError:
		log.Errorw(r.detail, zap.Error(r.err))
	case r.err != nil:
		log.Warnw(r.detail, zap.Error(r.err))
	case r.outcome == OutcomeQuit:
		log.Infow(r.detail)
	default:
		log.Debugw(r.detail)
	}
	return r
}

func (f *Function) handle(ctx context.Context, e cloudevents.Event) result {
	pod, err := podevent.Decode(e)
	if errors.Is(err, slim.ErrBeyondBounds) {
		f.refuseBeyondBounds(ctx, e, err)
	}
	if err != nil {
		return result{code: http.StatusBadRequest, outcome: OutcomeInvalid, detail: "invalid event", err: err}
	}
	if e.Type() == podevent.TypeAPIServerDelete {
		return result{code: http.StatusOK, outcome: OutcomeIgnored, detail: "pod deleted"}
	}
	set := f.live.Load()
	opts := set.Decision
	// The event's own pod state is enough to rule most events out without a
	// single API call: only a pod that looked done when it was published can
	// need a quit now. An event that names its pod only (podevent.New, for a
	// pod beyond the bounds) leaves the live pod to decide.
	if podevent.IdentityOnly(e) {
		f.metrics.beyondBounds.WithLabelValues("live").Inc()
	} else if d := decision.DecideForAnyKubelet(pod, opts); !d.Outcome.Acts() {
		return decided(d)
	}
	// A caller that gave up (the dispatcher's timeout, a closed connection)
	// gets no further API call or exec on its behalf: it will retry.
	if r, ended := contextEnded(ctx); ended {
		return r
	}
	live, r, ok := f.livePod(ctx, pod)
	if !ok {
		return r
	}
	ns, err := f.namespace(ctx, live.Namespace)
	if err != nil {
		return apiFailure("namespace "+live.Namespace, err)
	}
	if !decision.OptedIn(ns.Labels, live.Labels, live.Annotations) {
		return result{code: http.StatusOK, outcome: OutcomeNotOptedIn, detail: "pod is not opted in"}
	}
	livePod := slim.Of(live)
	if decision.KubeletMatters(livePod) {
		if opts.Kubelet, err = f.kubelet(ctx, live.Spec.NodeName); err != nil {
			return apiFailure("node "+live.Spec.NodeName, err)
		}
	}
	d := decision.Decide(livePod, opts)
	if !d.Outcome.Acts() {
		return decided(d)
	}
	if r, ended := contextEnded(ctx); ended {
		return r
	}
	if d.Outcome == decision.Replace {
		return f.replace(ctx, live, d)
	}
	return f.quit(ctx, live, d, set.QuitCommand)
}

// livePod GETs the pod the event names. ok is false when the returned result
// is final (gone, replaced or unreadable).
func (f *Function) livePod(ctx context.Context, want *slim.Pod) (*corev1.Pod, result, bool) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	// At least as new as the event: a read the API server serves from its
	// watch cache. A quorum read of etcd waits for every write in flight
	// (the kubelet's and the Job controller's, around a finishing pod), and
	// it reads nothing newer that matters: the pod can change after either
	// read and before the exec alike. If the cache cannot answer at that
	// version (a version it does not know, a cache lagging too long), the
	// pod is read from etcd.
	rv := cacheableVersion(want.ResourceVersion)
	live, err := f.cluster.Pod(ctx, want.Namespace, want.Name, rv)
	if err != nil && rv != "" && !apierrors.IsNotFound(err) {
		live, err = f.cluster.Pod(ctx, want.Namespace, want.Name, "")
	}
	if err != nil {
		return nil, apiFailure("pod "+want.Namespace+"/"+want.Name, err), false
	}
	if live.UID != want.UID {
		return nil, result{code: http.StatusOK, outcome: OutcomeUIDMismatch,
			detail: fmt.Sprintf("pod was replaced: live uid %s, event uid %s", live.UID, want.UID)}, false
	}
	return live, result{}, true
}

func (f *Function) namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	return f.cluster.Namespace(ctx, name)
}

// kubelet is the kubelet of node name, by the version it reports: a pod
// whose apps have a restart policy of their own is decided as that
// kubelet will act (decision.Kubelet). A node that is gone takes the
// newest kubelet's answer: its pods are gone or going with it.
func (f *Function) kubelet(ctx context.Context, name string) (decision.Kubelet, error) {
	if name == "" {
		return decision.Kubelet{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	n, err := f.cluster.Node(ctx, name)
	switch {
	case apierrors.IsNotFound(err):
		return decision.Kubelet{}, nil
	case err != nil:
		return decision.Kubelet{}, err
	}
	return decision.KubeletOf(n.Status.NodeInfo.KubeletVersion), nil
}

// cacheableVersion is rv if it names a version (a positive integer: "0"
// would accept any cached state, however old), else "" (most recent).
func cacheableVersion(rv string) string {
	if n, err := strconv.ParseUint(rv, 10, 64); err == nil && n > 0 {
		return rv
	}
	return ""
}

// refuseBeyondBounds tells the pod an event names, when its pod is beyond
// the decoder's bounds (an ApiServerSource event of a pod with more than
// slim.MaxContainers containers: the bridge's events never are), that
// istio-aux will not quit its proxy: a Warning Event and a metric rather
// than a silent 400.
func (f *Function) refuseBeyondBounds(ctx context.Context, e cloudevents.Event, err error) {
	f.metrics.beyondBounds.WithLabelValues("refused").Inc()
	id, idErr := podevent.DecodeIdentity(e)
	if idErr != nil {
		return
	}
	f.record(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: id.Namespace, Name: id.Name, UID: id.UID}},
		false, corev1.EventTypeWarning, names.ReasonProxyQuitFailed,
		fmt.Sprintf("istio-aux does not quit istio-proxy from this event: %v. Its bridge sends such pods by name and reads them live", err))
}
