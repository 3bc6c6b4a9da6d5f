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
	p := mesh.Pod(ns, name, "", corev1.RestartPolicyNever, corev1.Container{Name: app, Image: "busybox"})
	p.Annotations = map[string]string{cluster.AnnotationRunFor: "1s"}
	p.Spec.ServiceAccountName = istio.ServiceAccount
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

// send delivers e to the function as a dispatcher with tokenFile would,
// and returns the HTTP status (0 for none).
func send(t *testing.T, url, tokenFile string, e cloudevents.Event) (int, error) {
	t.Helper()
	sink, err := dispatch.NewHTTPSink(url, 10*time.Second, tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	res := sink.Send(context.Background(), e)
	var r *cehttp.Result
	if !cloudevents.ResultAs(res, &r) {
		return 0, res
	}
	return r.StatusCode, res
}

// TestGarbage sends malformed and hostile events to the real function over
// HTTP and through NATS to the real dispatcher, with no bridge running so
// that only these events could cause a quit. Each must be rejected (400 or
// Term) or ignored with a metric — never an exec — while one valid event at
// the end does cause the quit, showing the checks could fail.
func TestGarbage(t *testing.T) {
	s := startStack(t, false)
	in := mesh.Namespace(t, env, "-in", true, mesh.OptedIn)
	out := mesh.Namespace(t, env, "-out", true, nil)
	target := stuckPod(t, in, "target")
	other := stuckPod(t, out, "other")
	before := len(quits(t))
	noQuits := func(t *testing.T, what string) {
		t.Helper()
		if got := len(quits(t)) - before; got != 0 {
			t.Fatalf("%s caused %d quits", what, got)
		}
	}
	fnOutcome := func(t *testing.T, outcome string) float64 {
		return scrape(t, s.functionURL+"/metrics", fnEvents, `outcome="`+outcome+`"`)
	}

	// The slim pod keeps only the annotations istio-aux reads, so the
	// padding goes straight into the data.
	big := slim.Of(target)
	big.Annotations = slim.Kept{keys.AnnotationSidecars: strings.Repeat("x", 2<<20)}
	oversized := func(e *cloudevents.Event) { _ = e.SetData(cloudevents.ApplicationJSON, big) }
	wrongType := func(e *cloudevents.Event) { e.SetType("com.example.pod.done") }
	wrongUID := target.DeepCopy()
	wrongUID.UID = "00000000-0000-0000-0000-000000000000"
	missing := target.DeepCopy()
	missing.Name = "no-such-pod"

	t.Run("http", func(t *testing.T) {
		invalid0 := fnOutcome(t, "invalid")
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
			if code := resp.StatusCode; code < 400 || code >= 500 || code == 404 || code == 408 || code == 409 || code == 429 {
				t.Errorf("%s: status %d, want a 4xx that is never retried", c.name, code)
			}
		}
		rejected := len(raw)
		for _, c := range []struct {
			name  string
			event cloudevents.Event
			code  int
		}{
			{"wrong type", event(t, target, wrongType), 400},
			// Refused before it is read: the body is over the function's bound.
			{"oversized", event(t, target, oversized), 413},
			{"data is a ConfigMap", event(t, target, func(e *cloudevents.Event) {
				_ = e.SetData(cloudevents.ApplicationJSON, map[string]any{"kind": "ConfigMap",
					"metadata": map[string]string{"name": target.Name, "namespace": in, "uid": string(target.UID)}})
			}), 400},
			{"subject names a pod elsewhere", event(t, target, func(e *cloudevents.Event) { e.SetSubject(podevent.Subject(out, other.Name)) }), 400},
			{"namespace extension elsewhere", event(t, target, func(e *cloudevents.Event) { e.SetExtension(podevent.ExtNamespace, out) }), 400},
			{"pod in a namespace not opted in", event(t, other, nil), 200},
			{"wrong uid", event(t, wrongUID, nil), 200},
			{"pod that does not exist", event(t, missing, nil), 200},
		} {
			if code, res := send(t, s.functionURL, s.token, c.event); code != c.code {
				t.Errorf("%s: status %d, want %d (%v)", c.name, code, c.code, res)
			}
			if c.code >= 400 {
				rejected++
			}
		}
		// Every rejection is counted, undecodable requests included.
		if got := fnOutcome(t, "invalid") - invalid0; got != float64(rejected) {
			t.Errorf("invalid events counted %v, want %d", got, rejected)
		}
		for _, outcome := range []string{"not_opted_in", "uid_mismatch", "gone"} {
			if fnOutcome(t, outcome) < 1 {
				t.Errorf("no %s event counted", outcome)
			}
		}
		if scrape(t, s.functionURL+"/metrics", fnEvents, `type="other"`) < 1 {
			t.Error("the wrong type was not counted as type=other")
		}
		noQuits(t, "garbage over HTTP")
	})

	// A valid event for the target, from callers that may not deliver:
	// anything in the cluster that reaches the function's pod IP.
	t.Run("callers", func(t *testing.T) {
		unauth0, forbidden0 := fnOutcome(t, "unauthenticated"), fnOutcome(t, "forbidden")
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
			if code, res := send(t, s.functionURL, c.tokenFile, event(t, target, nil)); code != c.code {
				t.Errorf("%s: %v, want %d", c.name, res, c.code)
			}
		}
		if got := fnOutcome(t, "unauthenticated") - unauth0; got != 3 {
			t.Errorf("%v unauthenticated callers counted, want 3", got)
		}
		if got := fnOutcome(t, "forbidden") - forbidden0; got != 1 {
			t.Errorf("%v forbidden callers counted, want 1", got)
		}
		noQuits(t, "callers without the dispatcher's token")
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
		dispatched := func(name, label string) float64 { return scrape(t, s.dispatchMetrics, name, label) }
		decode0, rejected0 := dispatched(dispPoison, `reason="decode"`), dispatched(dispPoison, `reason="rejected"`)
		ok0 := dispatched("istio_aux_dispatch_delivered_total", `class="2xx"`)
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
			"wrong type":  encoded(event(t, target, wrongType)),
			"broken data": encoded(event(t, target, func(e *cloudevents.Event) { e.DataEncoded = []byte(`{"metadata":`) })),
			// On garbage-in's subject, naming a pod elsewhere.
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
				dispatched(dispPoison, `reason="decode"`)-decode0 == 1 &&
				dispatched(dispPoison, `reason="rejected"`)-rejected0 == 2 &&
				dispatched("istio_aux_dispatch_delivered_total", `class="2xx"`)-ok0 == 2, nil
		}); err != nil {
			t.Fatalf("dispatcher did not settle the garbage (1 undecodable, 2 refused by the function, 2 acked): %v", err)
		}
		noQuits(t, "garbage through NATS")

		// The positive control: the same pipeline quits the target for one
		// valid event, so the silence above was not a broken pipeline.
		if err := publish("valid", encoded(event(t, target, nil))); err != nil {
			t.Fatal(err)
		}
		if err := poll.Until(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			return len(byUID(quits(t))[string(target.UID)]) == 1, nil
		}); err != nil {
			t.Fatalf("a valid event did not quit the target: %v", err)
		}
		if got := len(quits(t)) - before; got != 1 {
			t.Errorf("%d quits after the valid event, want exactly 1", got)
		}
	})
}
