package dispatch

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"go.uber.org/zap"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/transport"
)

// Why a direct path at all: Knative's data path (ingress, activator) keeps
// sending to a pod whose node died until Kubernetes marks the pod NotReady,
// 40 to 55 s later, and answers 502 or hangs meanwhile; a revision's only
// pod on such a node is replaced only after the 300 s eviction. With two
// pods (the shipped min-scale), the dispatcher that delivers to them itself
// sets a dead one aside within its dial timeout (2 s) or unacknowledged-data
// timeout (5 s) and uses the other at once. Knative still sees each
// request: queue-proxy counts it for the autoscaler and enforces the
// revision's containerConcurrency. docs/design.md, "The Knative path under
// node loss".

// Knative's names for a revision's private Service (its pods' addresses)
// and the queue-proxy port in it.
const (
	// KnativeRevisionGeneration is the revision label whose value orders
	// revisions: the configuration's generation it was made from.
	KnativeRevisionGeneration = "serving.knative.dev/configurationGeneration"
	// knativeHTTPPort is the private Service's port name for queue-proxy's
	// HTTP/1 port (8012).
	knativeHTTPPort = "http"
)

// EjectFor is how long an address where nothing answered is left out:
// past the node-monitor grace period (50 s in Kubernetes 1.36), after which
// a dead node's pods are out of the EndpointSlices anyway.
const EjectFor = 60 * time.Second

// directTries bounds the pods one delivery dials before it takes K_SINK.
const directTries = 3

// Endpoints is the set of ready pod addresses of the function, read from
// its revisions' EndpointSlices, newest revision first, with the addresses
// set aside (Eject). Safe for concurrent use.
type Endpoints struct {
	now func() time.Time

	mu      sync.Mutex
	groups  [][]string // ready addresses by revision, newest first
	ejected map[string]time.Time
	next    int
	count   int // addresses in groups
	gauge   func(float64)
}

// NewEndpoints returns an empty set.
func NewEndpoints() *Endpoints {
	return &Endpoints{now: time.Now, ejected: map[string]time.Time{}, gauge: func(float64) {}}
}

// Update replaces the set with the ready, non-terminating endpoints of
// ss on their "http" port. An address no longer among them is no
// longer set aside (a new pod may reuse it).
func (e *Endpoints) Update(ss []*discoveryv1.EndpointSlice) {
	byGen := map[int64][]string{}
	for _, s := range ss {
		port := httpPort(s)
		if port == 0 {
			continue
		}
		gen, _ := strconv.ParseInt(s.Labels[KnativeRevisionGeneration], 10, 64)
		for _, ep := range s.Endpoints {
			c := ep.Conditions
			if len(ep.Addresses) == 0 || (c.Ready != nil && !*c.Ready) || (c.Terminating != nil && *c.Terminating) {
				continue
			}
			byGen[gen] = append(byGen[gen], net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port))))
		}
	}
	gens := make([]int64, 0, len(byGen))
	for g := range byGen {
		gens = append(gens, g)
	}
	slices.Sort(gens)
	slices.Reverse(gens) // newest first
	groups := make([][]string, 0, len(gens))
	present := map[string]bool{}
	n := 0
	for _, g := range gens {
		addrs := byGen[g]
		slices.Sort(addrs)
		addrs = slices.Compact(addrs)
		for _, a := range addrs {
			present[a] = true
		}
		n += len(addrs)
		groups = append(groups, addrs)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.groups, e.count = groups, n
	for a := range e.ejected {
		if !present[a] {
			delete(e.ejected, a)
		}
	}
	e.gauge(float64(n))
}

// Pick returns a ready address not set aside, from the newest revision
// that has one, taking its addresses in turn; false when there is none.
func (e *Endpoints) Pick() (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	for _, addrs := range e.groups {
		for range addrs {
			a := addrs[e.next%len(addrs)]
			e.next++
			if until, ok := e.ejected[a]; ok && now.Before(until) {
				continue
			}
			delete(e.ejected, a)
			return a, true
		}
	}
	return "", false
}

// Eject sets addr aside for EjectFor.
func (e *Endpoints) Eject(addr string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ejected[addr] = e.now().Add(EjectFor)
}

func httpPort(s *discoveryv1.EndpointSlice) int32 {
	for _, p := range s.Ports {
		if p.Name != nil && *p.Name == knativeHTTPPort && p.Port != nil {
			return *p.Port
		}
	}
	return 0
}

// WatchEndpoints keeps e up to date with the EndpointSlices in namespace
// that selector selects, until ctx is done. It does not wait for the first
// list: until then e is empty, and deliveries take K_SINK.
func WatchEndpoints(ctx context.Context, cs kubernetes.Interface, namespace, selector string, e *Endpoints) error {
	if _, err := labels.Parse(selector); err != nil {
		return err
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := f.Discovery().V1().EndpointSlices()
	lister := inf.Lister()
	update := func() {
		all, err := lister.List(labels.Everything())
		if err != nil {
			return
		}
		e.Update(all)
	}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	})
	if err != nil {
		return err
	}
	f.Start(ctx.Done())
	return nil
}

// DirectSink delivers each event to a ready pod of the function itself
// (Endpoints), and through its fallback (K_SINK) when no pod is ready or
// usable. A pod where a connection cannot be made is set aside and the next
// one tried at once: nothing was sent. One whose connection fails after the
// request went out is set aside too, and the delivery fails (retried with
// back-off, on another pod): the function may have acted on it.
type DirectSink struct {
	client   cloudevents.Client
	timeout  time.Duration
	eps      *Endpoints
	fallback Sink
	m        *metrics.Direct
	log      *zap.SugaredLogger
}

// NewDirectSink returns a sink delivering to eps's addresses (each request
// within timeout, with the bearer token in tokenFile if set) and to fallback
// when there is none.
func NewDirectSink(ctx context.Context, eps *Endpoints, fallback Sink, timeout time.Duration, tokenFile string, m *metrics.Direct) (*DirectSink, error) {
	if m == nil {
		m = metrics.NewDirect(nil)
	}
	// One pod per address: no retries of an address (WithServiceRetries);
	// the next pod is the retry.
	c, err := newCEClient(transport.NewDialer(), timeout, tokenFile)
	if err != nil {
		return nil, err
	}
	eps.mu.Lock()
	eps.gauge = m.Endpoints.Set
	eps.gauge(float64(eps.count))
	eps.mu.Unlock()
	return &DirectSink{client: c, timeout: timeout, eps: eps, fallback: fallback, m: m, log: logging.FromContext(ctx)}, nil
}

// Send delivers e to a ready pod, or through the fallback.
func (s *DirectSink) Send(ctx context.Context, e cloudevents.Event) cloudevents.Result {
	for range directTries {
		addr, ok := s.eps.Pick()
		if !ok {
			break
		}
		sctx, cancel := context.WithTimeout(ctx, s.timeout)
		res := s.client.Send(cloudevents.ContextWithTarget(sctx, "http://"+addr+"/"), e)
		cancel()
		how := unanswered(res)
		if how == answered || ctx.Err() != nil {
			s.m.Path.WithLabelValues("direct").Inc()
			return res
		}
		s.eps.Eject(addr)
		s.m.Ejections.Inc()
		s.log.Warnw("Nothing answered at a pod of the function; setting it aside", zap.String("address", addr),
			zap.Duration("for", EjectFor), zap.Error(res))
		if how == afterSend {
			s.m.Path.WithLabelValues("direct").Inc()
			return res
		}
	}
	s.m.Path.WithLabelValues("sink").Inc()
	return s.fallback.Send(ctx, e)
}

// How a delivery went, as far as the pod's liveness goes.
type answer int

const (
	answered  answer = iota // a response, or a failure that says nothing about the pod
	notSent                 // no connection: nothing reached the pod
	afterSend               // the connection died with the request out
)

// unanswered reads a send's error: a failed dial, or a connection reset,
// refused or timed out by the kernel (the peer's host gone: no route, no
// acknowledgment within transport.UnackedTimeout). A response of any status,
// or the request's own deadline (a slow function, not a dead one), is an
// answer.
func unanswered(res error) answer {
	var r *cehttp.Result
	if res == nil || cloudevents.ResultAs(res, &r) {
		return answered
	}
	var op *net.OpError
	if errors.As(res, &op) && op.Op == "dial" {
		return notSent
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH} {
		if errors.Is(res, errno) {
			return notSent
		}
	}
	for _, errno := range []syscall.Errno{syscall.ETIMEDOUT, syscall.ECONNRESET, syscall.EPIPE} {
		if errors.Is(res, errno) {
			return afterSend
		}
	}
	return answered
}

// newCEClient is a CloudEvents HTTP client over d, each request within
// timeout, presenting the token in tokenFile when set.
func newCEClient(d *transport.Dialer, timeout time.Duration, tokenFile string) (cloudevents.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = d.DialContext
	client := http.Client{Timeout: timeout, Transport: tr}
	if tokenFile != "" {
		client.Transport = newBearer(tr, tokenFile)
	}
	p, err := cehttp.New(cehttp.WithClient(client))
	if err != nil {
		return nil, err
	}
	return cloudevents.NewClient(p)
}
