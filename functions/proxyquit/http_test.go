package proxyquit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus"
)

// TestHTTPHandler sends real CloudEvents over HTTP, in binary mode as the
// dispatcher and Knative do, and reads the status codes back.
func TestHTTPHandler(t *testing.T) {
	done := donePod("job-1", "uid-1")
	h := newHarness(t, DefaultConfig(), optedIn, done)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h.fn.metrics = m
	ctx := context.Background()
	handler := h.fn.HTTPHandler(ctx, reg)
	srv := httptest.NewServer(handler)
	defer srv.Close()

	client, err := cloudevents.NewClientHTTP(cehttp.WithHeader("Authorization", "Bearer "+dispatcherToken))
	if err != nil {
		t.Fatal(err)
	}
	send := func(e cloudevents.Event) int {
		t.Helper()
		return codeOf(t, client.Send(cloudevents.ContextWithTarget(ctx, srv.URL), e))
	}

	if got := send(newEvent(t, done)); got != 200 {
		t.Errorf("done pod: code %d, want 200", got)
	}
	if got := len(h.exec.Calls()); got != 1 {
		t.Errorf("exec calls = %d, want 1", got)
	}
	bad := newEvent(t, done)
	bad.SetType("com.example.other")
	if got := send(bad); got != 400 {
		t.Errorf("bad type: code %d, want 400", got)
	}
	h.exec.hook = func(context.Context, execCall) (ExecOutput, error) { return ExecOutput{}, errBoom }
	if got := send(newEvent(t, done)); got != 500 {
		t.Errorf("failing exec: code %d, want 500", got)
	}

	body := get(t, srv.URL+"/metrics")
	for _, want := range []string{
		`istio_aux_proxyquit_events_total{outcome="quit",type="dev.istio-aux.pod.updated"} 1`,
		`istio_aux_proxyquit_events_total{outcome="invalid",type="other"} 1`,
		`istio_aux_proxyquit_events_total{outcome="failed",type="dev.istio-aux.pod.updated"} 1`,
		`istio_aux_proxyquit_exec_failures_total 1`,
		`istio_aux_proxyquit_exec_duration_seconds_count{result="ok"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if body := get(t, srv.URL+"/healthz"); body != "ok" {
		t.Errorf("/healthz = %q", body)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

func TestNewMetricsTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("second registration succeeded; want a clear error")
	}
}
