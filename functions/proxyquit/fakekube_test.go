package proxyquit

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/internal/kube"
)

// fakeKube is a kube-apiserver as far as a quit goes: it serves the pods
// given to it and an opted-in namespace, and takes Events (POSTed as
// protobuf, as the function's clients send them) and their deletes by
// name. answer, when set, is asked first about every Event write (try
// counts the writes of Events of that name, from 1): it answers the write
// itself and returns true (a failure, a hang), or returns false to let the
// write through.
type fakeKube struct {
	url    string
	answer func(w http.ResponseWriter, r *http.Request, e *corev1.Event, try int) bool

	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	events  map[string]*corev1.Event // by name
	tries   map[string]int
	deletes int                // Event deletes received
	arrived chan *corev1.Event // every Event write, as it arrives (buffered; full: not told)
}

func newFakeKube(t *testing.T, pods ...*corev1.Pod) *fakeKube {
	t.Helper()
	k := &fakeKube{pods: map[string]*corev1.Pod{}, events: map[string]*corev1.Event{}, tries: map[string]int{},
		arrived: make(chan *corev1.Event, 1024)}
	for _, p := range pods {
		k.pods[p.Name] = p.DeepCopy()
	}
	decode := serializer.NewCodecFactory(kube.Scheme).UniversalDeserializer()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nsPath := "/api/v1/namespaces/" + testNS
		switch {
		case r.Method == http.MethodGet && r.URL.Path == nsPath:
			writeJSON(w, http.StatusOK, &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Name: testNS, Labels: optedIn}})
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, nsPath+"/pods/"):
			k.mu.Lock()
			p, ok := k.pods[strings.TrimPrefix(r.URL.Path, nsPath+"/pods/")]
			k.mu.Unlock()
			if !ok {
				writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "pod not found")
				return
			}
			writeJSON(w, http.StatusOK, p)
		case r.Method == http.MethodPost && r.URL.Path == nsPath+"/events":
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			obj, _, err := decode.Decode(body, nil, nil)
			e, ok := obj.(*corev1.Event)
			if err != nil || !ok {
				writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "not an Event")
				return
			}
			k.mu.Lock()
			k.tries[e.Name]++
			try := k.tries[e.Name]
			k.mu.Unlock()
			select {
			case k.arrived <- e:
			default:
			}
			if k.answer != nil && k.answer(w, r, e, try) {
				return
			}
			k.mu.Lock()
			_, exists := k.events[e.Name]
			if !exists {
				k.events[e.Name] = e
			}
			k.mu.Unlock()
			if exists {
				writeStatus(w, http.StatusConflict, metav1.StatusReasonAlreadyExists, "events "+e.Name+" already exists")
				return
			}
			writeJSON(w, http.StatusCreated, e)
		case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, nsPath+"/events/"):
			name := strings.TrimPrefix(r.URL.Path, nsPath+"/events/")
			k.mu.Lock()
			_, exists := k.events[name]
			delete(k.events, name)
			k.deletes++
			k.mu.Unlock()
			if !exists {
				writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "events "+name+" not found")
				return
			}
			writeJSON(w, http.StatusOK, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
		default:
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, r.URL.Path+" not found")
		}
	}))
	t.Cleanup(srv.Close)
	k.url = srv.URL
	return k
}

// written are the Events the API server holds with reason, by the name
// of their pod.
func (k *fakeKube) written(reason string) map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]int{}
	for _, e := range k.events {
		if e.Reason == reason {
			out[e.InvolvedObject.Name] += int(max(e.Count, 1))
		}
	}
	return out
}

func writeJSON(w http.ResponseWriter, code int, obj any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(obj)
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeJSON(w, code, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Reason: reason, Code: int32(code), Message: msg})
}

// dropConnection answers a request with a closed connection: a transport
// error, as from an API server that went away.
func dropConnection(w http.ResponseWriter) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = c.Close()
	}
}

// wired is a Function built by NewFromConfig against k, as in a cluster
// (its clients, their rate limits, its Events), with the exec faked,
// authentication off, metrics on reg and its log observed.
type wired struct {
	fn   *Function
	reg  *prometheus.Registry
	logs *observer.ObservedLogs
	ctx  context.Context // carries the observed logger
}

func newWired(t *testing.T, rc *rest.Config, exec Execer) *wired {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	ctx, cancel := context.WithCancel(logging.WithLogger(context.Background(), zap.New(core).Sugar()))
	t.Cleanup(cancel)
	cfg := DefaultConfig()
	cfg.Auth.Disabled = true
	reg := prometheus.NewRegistry()
	fn, err := NewFromConfig(ctx, rc, cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	fn.exec = exec
	return &wired{fn: fn, reg: reg, logs: logs, ctx: ctx}
}

// unwritten is the value of the unwritten Events counter for the labels.
func (w *wired) unwritten(t *testing.T, labels map[string]string) float64 {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "istio_aux_proxyquit_events_unwritten_total" {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
