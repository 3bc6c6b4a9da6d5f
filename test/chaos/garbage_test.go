//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/bridge/dispatch"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

const (
	fnEvents   = "istio_aux_proxyquit_events_total"
	dispPoison = "istio_aux_dispatch_poison_total"
)

// stuckPod creates a bare pod whose app ends after a second and waits
// until it is done with istio-proxy still running: a pod one valid event
// away from a quit.
func stuckPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{cluster.AnnotationRunFor: "1s"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, ServiceAccountName: istio.ServiceAccount,
			Containers: []corev1.Container{{Name: app, Image: "busybox"}}},
	}
	mesh.CreatePod(t, env, p)
	return mesh.WaitPod(t, env, ns, name, time.Minute, func(p *corev1.Pod) bool { return mesh.Stuck(p, app) })
}

func event(t *testing.T, p *corev1.Pod, mutate func(*cloudevents.Event)) cloudevents.Event {
	t.Helper()
	e, err := podevent.New("https://chaos.invalid", slim.Of(p))
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(&e)
	}
	return e
}

// TestGarbage sends malformed and hostile events to the real function over
// HTTP and through NATS to the real dispatcher, with no bridge running so
// that only these events could cause a quit. Each must be rejected (400 or
// Term) or ignored with a metric — never an exec — while one valid event at
// the end does cause the quit, showing the checks could fail.
func TestGarbage(t *testing.T) {
	s := startStack(t, false)
	in := mesh.Namespace(t, env, "-in", true, map[string]string{keys.LabelEnabled: "true"})
	out := mesh.Namespace(t, env, "-out", true, nil)
	target := stuckPod(t, in, "target")
	other := stuckPod(t, out, "other")
	quits := quitCount(t)
	fnMetrics := s.functionURL + "/metrics"

	// The slim pod keeps only the annotations istio-aux reads, so the
	// padding goes straight into the data.
	big := slim.Of(target)
	big.Annotations = slim.Kept{keys.AnnotationSidecars: strings.Repeat("x", 2<<20)}
	oversized := func(e *cloudevents.Event) { _ = e.SetData(cloudevents.ApplicationJSON, big) }
	wrongUID := target.DeepCopy()
	wrongUID.UID = "00000000-0000-0000-0000-000000000000"
	missing := target.DeepCopy()
	missing.Name = "no-such-pod"

	t.Run("http", func(t *testing.T) {
		invalid0 := scrape(t, fnMetrics, fnEvents, `outcome="invalid"`)
		raw := []struct {
			name, contentType, body string
			headers                 map[string]string
		}{
			{name: "not a CloudEvent", contentType: "text/plain", body: "hello"},
			{name: "broken structured JSON", contentType: "application/cloudevents+json", body: `{"specversion":"1.0","id":`},
			{name: "binary without id", contentType: "application/json", body: string(event(t, target, nil).Data()),
				headers: map[string]string{"ce-specversion": "1.0", "ce-type": podevent.TypePodUpdated, "ce-source": "x"}},
		}
		token, err := os.ReadFile(s.token)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range raw {
			name := c.name
			req, _ := http.NewRequest(http.MethodPost, s.functionURL, strings.NewReader(c.body))
			req.Header.Set("Content-Type", c.contentType)
			req.Header.Set("Authorization", "Bearer "+string(token))
			for k, v := range c.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			resp.Body.Close()
			// Any 4xx but the four Knative retries is final (dispatch.Classify).
			if c := resp.StatusCode; c < 400 || c >= 500 || c == 404 || c == 408 || c == 409 || c == 429 {
				t.Errorf("%s: status %d, want a 4xx that is never retried", name, c)
			}
		}
		sink, err := dispatch.NewHTTPSink(s.functionURL, 10*time.Second, s.token)
		if err != nil {
			t.Fatal(err)
		}
		events := []struct {
			name  string
			event cloudevents.Event
			code  int
		}{
			{"wrong type", event(t, target, func(e *cloudevents.Event) { e.SetType("com.example.pod.done") }), 400},
			// Refused before it is read: the body is over the function's bound.
			{"oversized", event(t, target, oversized), 413},
			{"data is a ConfigMap", event(t, target, func(e *cloudevents.Event) {
				_ = e.SetData(cloudevents.ApplicationJSON, map[string]any{"kind": "ConfigMap",
					"metadata": map[string]string{"name": target.Name, "namespace": in, "uid": string(target.UID)}})
			}), 400},
			{"subject names a pod elsewhere", event(t, target, func(e *cloudevents.Event) {
				e.SetSubject(podevent.Subject(out, other.Name))
			}), 400},
			{"namespace extension elsewhere", event(t, target, func(e *cloudevents.Event) { e.SetExtension(podevent.ExtNamespace, out) }), 400},
			{"pod in a namespace not opted in", event(t, other, nil), 200},
			{"wrong uid", event(t, wrongUID, nil), 200},
			{"pod that does not exist", event(t, missing, nil), 200},
		}
		rejected := len(raw)
		for _, c := range events {
			res := sink.Send(context.Background(), c.event)
			var r *cehttp.Result
			if !cloudevents.ResultAs(res, &r) {
				t.Errorf("%s: no HTTP result: %v", c.name, res)
				continue
			}
			if r.StatusCode != c.code {
				t.Errorf("%s: status %d, want %d (%v)", c.name, r.StatusCode, c.code, res)
			}
			if c.code >= 400 {
				rejected++
			}
		}
		// Every rejection is counted, undecodable requests included.
		if got := scrape(t, fnMetrics, fnEvents, `outcome="invalid"`) - invalid0; got != float64(rejected) {
			t.Errorf("invalid events counted %v, want %d", got, rejected)
		}
		for _, outcome := range []string{"not_opted_in", "uid_mismatch", "gone"} {
			if scrape(t, fnMetrics, fnEvents, `outcome="`+outcome+`"`) < 1 {
				t.Errorf("no %s event counted", outcome)
			}
		}
		if scrape(t, fnMetrics, fnEvents, `type="other"`) < 1 {
			t.Error("the wrong type was not counted as type=other")
		}
		if got := quitCount(t); got != quits {
			t.Fatalf("garbage over HTTP caused %d quits", got-quits)
		}
	})

	// A valid event for the target, from callers that may not deliver:
	// anything in the cluster that reaches the function's pod IP.
	t.Run("callers", func(t *testing.T) {
		unauth0 := scrape(t, fnMetrics, fnEvents, `outcome="unauthenticated"`)
		forbidden0 := scrape(t, fnMetrics, fnEvents, `outcome="forbidden"`)
		stranger, err := istioaux.Token(context.Background(), env.Client(), in, "default", proxyquit.DefaultAudience, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		wrongAudience, err := istioaux.Token(context.Background(), env.Client(), istioaux.SystemNamespace, "istio-aux-bridge", "https://kubernetes.default.svc", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		forged := filepath.Join(t.TempDir(), "forged")
		if err := os.WriteFile(forged, []byte("eyJhbGciOiJub25lIn0.e30."), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name, tokenFile string
			code            int
		}{
			{"no token", "", 401},
			{"a forged token", forged, 401},
			{"the bridge's token for the API server's audience", wrongAudience, 401},
			{"another ServiceAccount's token for the function", stranger, 403},
		} {
			sink, err := dispatch.NewHTTPSink(s.functionURL, 10*time.Second, c.tokenFile)
			if err != nil {
				t.Fatal(err)
			}
			var r *cehttp.Result
			if res := sink.Send(context.Background(), event(t, target, nil)); !cloudevents.ResultAs(res, &r) || r.StatusCode != c.code {
				t.Errorf("%s: %v, want %d", c.name, res, c.code)
			}
		}
		if got := scrape(t, fnMetrics, fnEvents, `outcome="unauthenticated"`) - unauth0; got != 3 {
			t.Errorf("%v unauthenticated callers counted, want 3", got)
		}
		if got := scrape(t, fnMetrics, fnEvents, `outcome="forbidden"`) - forbidden0; got != 1 {
			t.Errorf("%v forbidden callers counted, want 1", got)
		}
		if got := quitCount(t); got != quits {
			t.Fatalf("callers without the dispatcher's token caused %d quits", got-quits)
		}
	})

	t.Run("nats", func(t *testing.T) {
		nc, err := nats.Connect(s.natsURL)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		decode0 := scrape(t, s.dispatchMetrics, dispPoison, `reason="decode"`)
		rejected0 := scrape(t, s.dispatchMetrics, dispPoison, `reason="rejected"`)
		ok0 := scrape(t, s.dispatchMetrics, "istio_aux_dispatch_delivered_total", `class="2xx"`)
		// Each on a subject of its own: the stream keeps one message per
		// subject, and every one of them must reach the dispatcher.
		n := 0
		publish := func(name string, msg *nats.Msg) error {
			n++
			msg.Subject = transport.Subject(in, fmt.Sprintf("garbage-%d", n))
			_, err := js.PublishMsg(ctx, msg)
			if err != nil {
				t.Logf("%s: publish: %v", name, err)
			}
			return err
		}
		encoded := func(e cloudevents.Event) *nats.Msg {
			msg := &nats.Msg{}
			if err := transport.WriteEvent(ctx, &e, msg); err != nil {
				t.Fatal(err)
			}
			return msg
		}
		for name, msg := range map[string]*nats.Msg{
			"no headers":  {Data: []byte("\x00\xffgarbage")},
			"wrong type":  encoded(event(t, target, func(e *cloudevents.Event) { e.SetType("com.example.pod.done") })),
			"broken data": encoded(event(t, target, func(e *cloudevents.Event) { e.DataEncoded = []byte(`{"metadata":`) })),
		} {
			if err := publish(name, msg); err != nil {
				t.Fatal(err)
			}
		}
		// Published on garbage-in's subject, naming a pod elsewhere.
		for name, msg := range map[string]*nats.Msg{
			"pod in a namespace not opted in": encoded(event(t, other, nil)),
			"wrong uid":                       encoded(event(t, wrongUID, nil)),
		} {
			if err := publish(name, msg); err != nil {
				t.Fatal(err)
			}
		}
		if err := publish("oversized", encoded(event(t, target, oversized))); err == nil {
			t.Error("a 2 MiB event was accepted by JetStream")
		}
		cons, err := js.Consumer(ctx, transport.DefaultName, transport.Durable)
		if err != nil {
			t.Fatal(err)
		}
		if err := poll.Until(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			info, err := cons.Info(ctx)
			if err != nil {
				return false, err
			}
			return info.NumPending == 0 && info.NumAckPending == 0 &&
				// The dispatcher reads only the envelope: a wrong type and broken
				// data reach the function, which refuses them (400).
				scrape(t, s.dispatchMetrics, dispPoison, `reason="decode"`)-decode0 == 1 &&
				scrape(t, s.dispatchMetrics, dispPoison, `reason="rejected"`)-rejected0 == 2 &&
				scrape(t, s.dispatchMetrics, "istio_aux_dispatch_delivered_total", `class="2xx"`)-ok0 == 2, nil
		}); err != nil {
			t.Fatalf("dispatcher did not settle the garbage (1 undecodable, 2 refused by the function, 2 acked): %v", err)
		}
		if got := quitCount(t); got != quits {
			t.Fatalf("garbage through NATS caused %d quits", got-quits)
		}

		// The positive control: the same pipeline quits the target for one
		// valid event, so the silence above was not a broken pipeline.
		if err := publish("valid", encoded(event(t, target, nil))); err != nil {
			t.Fatal(err)
		}
		if err := poll.Until(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			return len(quitsByUID(t)[string(target.UID)]) == 1, nil
		}); err != nil {
			t.Fatalf("a valid event did not quit the target: %v", err)
		}
		if got := quitCount(t); got != quits+1 {
			t.Errorf("%d quits after the valid event, want exactly 1", got-quits)
		}
	})
}
