package proxyquit

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/istio-aux/istio-aux/internal/kube"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

const (
	testNS     = "team-a"
	testSource = "https://127.0.0.1:6443"
)

// execCall is one call the fake execer saw.
type execCall struct {
	Namespace, Pod, Container string
	Argv                      []string
}

// fakeExecer records calls; hook, when set, decides the result (and may
// change the fake cluster, as a real quit would).
type fakeExecer struct {
	mu    sync.Mutex
	calls []execCall
	hook  func(ctx context.Context, c execCall) (ExecOutput, error)
}

func (f *fakeExecer) Exec(ctx context.Context, namespace, pod, container string, argv []string) (ExecOutput, error) {
	c := execCall{namespace, pod, container, slices.Clone(argv)}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	hook := f.hook
	f.mu.Unlock()
	if hook != nil {
		return hook(ctx, c)
	}
	return ExecOutput{}, nil
}

func (f *fakeExecer) Calls() []execCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// harness is one Function over a fake API with an opted-in namespace. Its
// Kubernetes Events are written as NewFromConfig writes them (eventLog),
// to an events API of their own (kube), as the function's Events go
// through a client of their own: client's actions are the rest.
type harness struct {
	fn      *Function
	client  *fake.Clientset
	kube    *eventStore
	exec    *fakeExecer
	metrics *Metrics
	seen    map[string]bool // the Events events returned, by name
}

func newHarness(t testing.TB, cfg Config, nsLabels map[string]string, objects ...*corev1.Pod) *harness {
	t.Helper()
	h := &harness{
		client: fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS, Labels: nsLabels}}),
		kube:   &eventStore{events: map[string]*corev1.Event{}},
		exec:   &fakeExecer{},
		seen:   map[string]bool{},
	}
	for _, p := range objects {
		h.setPod(t, p)
	}
	h.client.PrependReactor("create", "tokenreviews", reviewTokens)
	m, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	h.metrics = m
	events := newEventLog(h.kube, kube.Scheme)
	events.lost = unwrittenEvent(zap.NewNop().Sugar(), m)
	h.fn, err = New(cfg, ClientCluster{Client: h.client}, h.exec, events, m)
	if err != nil {
		t.Fatal(err)
	}
	h.fn.events = events
	// A failed exec's pod is watched for its proxy to stop for a moment,
	// not for the seconds a kubelet may take.
	h.fn.exitWait = 500 * time.Millisecond
	// The keys the cluster publishes, as NewFromConfig reads them.
	issuer, keys, _ := testKeys{}.Discover(context.Background())
	h.fn.auth.keys.set(issuer, keys)
	return h
}

var optedIn = map[string]string{"istio-aux.dev/enabled": "true"}

// Tokens the harness's cluster issued, for the function's audience: the
// dispatcher's, and one of a pod that may not call the function.
const (
	dispatcherUser = "system:serviceaccount:istio-aux:istio-aux-bridge"
	strangerUser   = "system:serviceaccount:team-a:default"
)

var (
	dispatcherToken = signToken(tokenSpec{})
	strangerToken   = signToken(tokenSpec{subject: strangerUser})
)

// reviewTokens answers TokenReviews as the API server would for the
// harness's tokens; any other token, or another audience, is refused.
func reviewTokens(a k8stesting.Action) (bool, runtime.Object, error) {
	r := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
	users := map[string]string{dispatcherToken: dispatcherUser, strangerToken: strangerUser}
	if user, ok := users[r.Spec.Token]; ok && slices.Equal(r.Spec.Audiences, []string{DefaultAudience}) {
		r.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: r.Spec.Audiences,
			User: authenticationv1.UserInfo{Username: user}}
	} else {
		r.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
	}
	return true, r, nil
}

// authorize makes req the dispatcher's.
func authorize(req *http.Request) { req.Header.Set("Authorization", "Bearer "+dispatcherToken) }

// setPod makes p the live pod (created or replaced).
func (h *harness) setPod(t testing.TB, p *corev1.Pod) {
	t.Helper()
	pods := h.client.CoreV1().Pods(p.Namespace)
	ctx := context.Background()
	if _, err := pods.Get(ctx, p.Name, metav1.GetOptions{}); err == nil {
		if _, err := pods.Update(ctx, p.DeepCopy(), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := pods.Create(ctx, p.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// events are the Kubernetes Events the API holds that an earlier call did
// not return, oldest first, each "type reason message" (as client-go's
// FakeRecorder writes them). An Event written and deleted since is not
// among them.
func (h *harness) events() []string {
	var out []string
	for _, e := range h.kube.held() {
		if !h.seen[e.Name] {
			h.seen[e.Name] = true
			out = append(out, e.Type+" "+e.Reason+" "+e.Message)
		}
	}
	return out
}

// quitEvents are the ProxyQuit Events the API holds, by the name of their
// pod.
func (h *harness) quitEvents() map[string]int {
	out := map[string]int{}
	for _, e := range h.kube.held() {
		if e.Reason == names.ReasonProxyQuit {
			out[e.InvolvedObject.Name]++
		}
	}
	return out
}

// eventStore is an API server's events endpoint (the function's
// eventSink): it holds the Events written, by name, as kube-apiserver
// does (a second write of a name is AlreadyExists, a delete of a name it
// does not hold NotFound), and records every call. create and del, when
// set, are asked first: an error is the answer (nothing is written or
// deleted), nil lets the call through.
type eventStore struct {
	mu     sync.Mutex
	events map[string]*corev1.Event
	calls  []string // "create NAME" or "delete NAME", in order
	create func(e *corev1.Event) error
	del    func(name string) error
}

func (s *eventStore) CreateEvent(_ context.Context, e *corev1.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "create "+e.Name)
	if s.create != nil {
		if err := s.create(e); err != nil {
			return err
		}
	}
	if _, ok := s.events[e.Name]; ok {
		return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "events"}, e.Name)
	}
	s.events[e.Name] = e.DeepCopy()
	return nil
}

func (s *eventStore) DeleteEvent(_ context.Context, _, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "delete "+name)
	if s.del != nil {
		if err := s.del(name); err != nil {
			return err
		}
	}
	if _, ok := s.events[name]; !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "events"}, name)
	}
	delete(s.events, name)
	return nil
}

// held are the Events the store holds, oldest first.
func (s *eventStore) held() []*corev1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.SortedFunc(maps.Values(s.events), func(a, b *corev1.Event) int {
		return cmp.Or(a.FirstTimestamp.Compare(b.FirstTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
}

// log is the calls the store took, in order.
func (s *eventStore) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (h *harness) count(eventType string, outcome Outcome) float64 {
	return counterValue(h.metrics.events.WithLabelValues(typeLabel(eventType), string(outcome)))
}

func counterValue(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return float64(m.Histogram.GetSampleCount())
}

// codeOf reads a result the way the dispatcher does.
func codeOf(t testing.TB, res cloudevents.Result) int {
	t.Helper()
	var r *cehttp.Result
	if !cloudevents.ResultAs(res, &r) {
		t.Fatalf("result %v is not an HTTP result", res)
	}
	return r.StatusCode
}

func newEvent(t testing.TB, p *corev1.Pod) cloudevents.Event {
	t.Helper()
	e, err := podevent.New(testSource, slim.Of(p))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// podSpec describes a pod compactly: apps and their states, in order.
type podSpec struct {
	name, uid   string
	policy      corev1.RestartPolicy
	apps        []string // app container names
	states      map[string]corev1.ContainerState
	proxy       corev1.ContainerState
	annotations map[string]string
	labels      map[string]string
}

var (
	running = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Unix(1700000000, 0))}}
	exited  = func(code int32) corev1.ContainerState {
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}
	}
)

func (s podSpec) pod() *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: testNS, UID: types.UID(s.uid), ResourceVersion: "1", Annotations: s.annotations, Labels: s.labels},
		Spec:       corev1.PodSpec{RestartPolicy: s.policy},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "istio-proxy"})
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "istio-proxy", State: s.proxy, Ready: s.proxy.Running != nil})
	for _, a := range s.apps {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: a})
		st := s.states[a]
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: a, State: st, Ready: st.Running != nil})
	}
	return p
}

// donePod is a Never pod whose single app exited 0 while istio-proxy runs:
// the canonical "quit now" pod.
func donePod(name, uid string) *corev1.Pod {
	return podSpec{name: name, uid: uid, policy: corev1.RestartPolicyNever, apps: []string{"app"},
		states: map[string]corev1.ContainerState{"app": exited(0)}, proxy: running}.pod()
}

var errBoom = errors.New("boom")

// ClientCluster is a Cluster over a clientset (a fake one in these tests);
// the function itself reads through internal/kube.
type ClientCluster struct {
	Client kubernetes.Interface
}

// Pod implements Cluster.
// A fake clientset has no watch cache: every read is the most recent.
func (c ClientCluster) Pod(ctx context.Context, namespace, name, _ string) (*corev1.Pod, error) {
	return c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Review implements Reviewer: the fake clientset's TokenReview answers
// what a reactor says (by default: not authenticated).
func (c ClientCluster) Review(ctx context.Context, token string, audiences []string) (authenticationv1.TokenReviewStatus, error) {
	r, err := c.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences}}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.TokenReviewStatus{}, err
	}
	return r.Status, nil
}

// Namespace implements Cluster.
func (c ClientCluster) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	return c.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
}

// Node implements Cluster.
func (c ClientCluster) Node(ctx context.Context, name string) (*corev1.Node, error) {
	return c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// DeletePod implements Cluster. The fake clientset checks no
// preconditions: it deletes by name.
func (c ClientCluster) DeletePod(ctx context.Context, namespace, name string, uid types.UID, resourceVersion string) error {
	return c.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &resourceVersion}})
}
