package dispatch

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/bridge/metrics"
)

// slice is an EndpointSlice of a Knative revision's private Service: its
// "http" port and the given addresses, ready unless listed in notReady.
func slice(name string, gen string, port int32, addrs []string, notReady ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "istio-aux", Labels: map[string]string{
			"serving.knative.dev/service": "proxy-quit", KnativeRevisionGeneration: gen,
			"networking.internal.knative.dev/serviceType": "Private"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("https"), Port: ptr.To[int32](8112)},
			{Name: ptr.To("http"), Port: ptr.To(port)},
		},
	}
	for _, a := range addrs {
		ready := !strings.Contains(strings.Join(notReady, " "), a)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}})
	}
	return s
}

func picks(e *Endpoints, n int) map[string]int {
	got := map[string]int{}
	for range n {
		a, ok := e.Pick()
		if !ok {
			a = "none"
		}
		got[a]++
	}
	return got
}

func TestEndpointsPickTheNewestRevisionsReadyPodsInTurn(t *testing.T) {
	e := NewEndpoints()
	if _, ok := e.Pick(); ok {
		t.Fatal("an empty set picked an address")
	}
	old := slice("rev1-private-abc", "1", 8012, []string{"10.0.0.1"})
	cur := slice("rev2-private-def", "2", 8012, []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}, "10.0.0.4")
	terminating := cur.Endpoints[1].DeepCopy()
	terminating.Addresses = []string{"10.0.0.5"}
	terminating.Conditions.Terminating = ptr.To(true)
	cur.Endpoints = append(cur.Endpoints, *terminating)
	e.Update([]*discoveryv1.EndpointSlice{old, cur})
	if got := picks(e, 4); got["10.0.0.2:8012"] != 2 || got["10.0.0.3:8012"] != 2 {
		t.Errorf("picks %v: want the newest revision's two ready, non-terminating pods in turn", got)
	}

	e.Eject("10.0.0.2:8012")
	if got := picks(e, 3); got["10.0.0.3:8012"] != 3 {
		t.Errorf("picks %v after one was set aside: want only the other", got)
	}
	e.Eject("10.0.0.3:8012")
	if got := picks(e, 2); got["10.0.0.1:8012"] != 2 {
		t.Errorf("picks %v with the newest revision's pods set aside: want the older revision's", got)
	}
	e.Eject("10.0.0.1:8012")
	if a, ok := e.Pick(); ok {
		t.Errorf("picked %s with every pod set aside", a)
	}

	now := time.Now()
	e.now = func() time.Time { return now.Add(EjectFor + time.Second) }
	if got := picks(e, 2); got["10.0.0.2:8012"] != 1 || got["10.0.0.3:8012"] != 1 {
		t.Errorf("picks %v after %s: want the set-aside pods back", got, EjectFor)
	}

	// A pod gone from the slices is forgotten; its address, reused by a
	// new pod, is not set aside.
	e.now = time.Now
	e.Eject("10.0.0.2:8012")
	e.Update([]*discoveryv1.EndpointSlice{slice("rev2-private-def", "2", 8012, []string{"10.0.0.3"})})
	e.Update([]*discoveryv1.EndpointSlice{slice("rev2-private-def", "2", 8012, []string{"10.0.0.2"})})
	if a, ok := e.Pick(); !ok || a != "10.0.0.2:8012" {
		t.Errorf("picked %q, %v: want the new pod at the reused address", a, ok)
	}
}

// pod is a function pod: a CloudEvents endpoint answering status.
func pod(t *testing.T, status int, served *atomic.Int32) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// deadAddress is an address where nothing listens any more.
func deadAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// resetting is a pod whose host goes with a request in hand: it reads the
// request and resets the connection.
func resetting(t *testing.T, got *atomic.Int32) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			got.Add(1)
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	return l.Addr().String()
}

func event() cloudevents.Event {
	e := cloudevents.NewEvent()
	e.SetID("1")
	e.SetSource("test")
	e.SetType("dev.istio-aux.pod")
	return e
}

func hostPort(addr string) (string, int32) {
	h, p, _ := net.SplitHostPort(addr)
	var n int32
	for _, c := range p {
		n = n*10 + (c - '0')
	}
	return h, n
}

// endpointsAt is a set of the given addresses (all on 127.0.0.1, each its
// own port: one slice per address).
func endpointsAt(addrs ...string) *Endpoints {
	e := NewEndpoints()
	var ss []*discoveryv1.EndpointSlice
	for i, a := range addrs {
		h, p := hostPort(a)
		ss = append(ss, slice("s"+string(rune('a'+i)), "1", p, []string{h}))
	}
	e.Update(ss)
	return e
}

func TestDirectSink(t *testing.T) {
	var live, fallback, reset atomic.Int32
	fb := SinkFunc(func(context.Context, cloudevents.Event) cloudevents.Result {
		fallback.Add(1)
		return nil
	})
	newSink := func(e *Endpoints) (*DirectSink, *metrics.Direct) {
		m := metrics.NewDirect(nil)
		s, err := NewDirectSink(context.Background(), e, fb, 5*time.Second, "", m)
		if err != nil {
			t.Fatal(err)
		}
		return s, m
	}
	reset0 := func() { live.Store(0); fallback.Store(0); reset.Store(0) }

	t.Run("a dead pod is set aside and the live one takes the event at once", func(t *testing.T) {
		reset0()
		dead, ok := deadAddress(t), pod(t, http.StatusOK, &live)
		s, m := newSink(endpointsAt(dead, ok))
		for range 4 {
			if res := s.Send(context.Background(), event()); !cloudevents.IsACK(res) {
				t.Fatalf("send: %v", res)
			}
		}
		if live.Load() != 4 || fallback.Load() != 0 {
			t.Errorf("live pod served %d, fallback %d: want 4 and 0", live.Load(), fallback.Load())
		}
		if n := testutil.ToFloat64(m.Ejections); n != 1 {
			t.Errorf("ejections %v, want 1 (then the dead pod is left out)", n)
		}
		if n := testutil.ToFloat64(m.Path.WithLabelValues("direct")); n != 4 {
			t.Errorf("direct deliveries %v, want 4", n)
		}
		if n := testutil.ToFloat64(m.Endpoints); n != 2 {
			t.Errorf("endpoints gauge %v, want 2", n)
		}
	})

	t.Run("no ready pod: K_SINK", func(t *testing.T) {
		reset0()
		s, m := newSink(NewEndpoints())
		if res := s.Send(context.Background(), event()); !cloudevents.IsACK(res) || fallback.Load() != 1 {
			t.Errorf("send %v, fallback %d: want the fallback's answer", res, fallback.Load())
		}
		if n := testutil.ToFloat64(m.Path.WithLabelValues("sink")); n != 1 {
			t.Errorf("sink deliveries %v, want 1", n)
		}
	})

	t.Run("every pod dead: K_SINK", func(t *testing.T) {
		reset0()
		s, _ := newSink(endpointsAt(deadAddress(t), deadAddress(t)))
		if res := s.Send(context.Background(), event()); !cloudevents.IsACK(res) || fallback.Load() != 1 {
			t.Errorf("send %v, fallback %d: want the fallback's answer", res, fallback.Load())
		}
	})

	t.Run("an answer of any status is the pod's: not set aside, not sent again", func(t *testing.T) {
		reset0()
		var failing atomic.Int32
		s, m := newSink(endpointsAt(pod(t, http.StatusServiceUnavailable, &failing)))
		res := s.Send(context.Background(), event())
		if a, _ := Classify(res); a != Nak || failing.Load() != 1 || fallback.Load() != 0 {
			t.Errorf("send %v (served %d, fallback %d): want the pod's 503, once", res, failing.Load(), fallback.Load())
		}
		if n := testutil.ToFloat64(m.Ejections); n != 0 {
			t.Errorf("ejections %v, want 0", n)
		}
	})

	t.Run("a connection lost with the request out fails the delivery; the pod is set aside", func(t *testing.T) {
		reset0()
		s, m := newSink(endpointsAt(resetting(t, &reset), pod(t, http.StatusOK, &live)))
		var failed int
		for range 3 {
			res := s.Send(context.Background(), event())
			if a, _ := Classify(res); a == Nak {
				failed++
			}
		}
		// The request may have reached the function: not sent to another
		// pod within the same delivery, but retried later (Nak) elsewhere.
		if reset.Load() != 1 || failed != 1 || live.Load() != 2 || fallback.Load() != 0 {
			t.Errorf("reset %d, failed %d, live %d, fallback %d: want 1, 1, 2, 0", reset.Load(), failed, live.Load(), fallback.Load())
		}
		if n := testutil.ToFloat64(m.Ejections); n != 1 {
			t.Errorf("ejections %v, want 1", n)
		}
	})
}

func TestWatchEndpointsFollowsTheSlices(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(
		slice("proxy-quit-00001-private-x", "1", 8012, []string{"10.0.0.7"}),
	)
	other := slice("other-private", "9", 8012, []string{"10.9.9.9"})
	other.Labels["serving.knative.dev/service"] = "other"
	if _, err := cs.DiscoveryV1().EndpointSlices("istio-aux").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := NewEndpoints()
	if err := WatchEndpoints(ctx, cs, "istio-aux", "serving.knative.dev/service=proxy-quit", e); err != nil {
		t.Fatal(err)
	}
	want := func(addr string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			a, _ := e.Pick()
			if a == addr {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("picked %q, want %q", a, addr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want("10.0.0.7:8012")
	_, err := cs.DiscoveryV1().EndpointSlices("istio-aux").Update(ctx,
		slice("proxy-quit-00001-private-x", "1", 8012, []string{"10.0.0.7"}, "10.0.0.7"), metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want("")
	if err := WatchEndpoints(ctx, cs, "istio-aux", "a in (", NewEndpoints()); err == nil {
		t.Error("a bad selector was accepted")
	}
}
