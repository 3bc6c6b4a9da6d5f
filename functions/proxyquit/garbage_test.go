package proxyquit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// TestHTTPGarbage posts what a broken or hostile sender might to the HTTP
// handler, about a pod that one valid event would quit: every request must
// get a 4xx that Knative delivery and the dispatcher never retry, and none
// may exec. (test/chaos repeats this against the real binary and NATS.)
func TestHTTPGarbage(t *testing.T) {
	done := donePod("job-1", "uid-1")
	h := newHarness(t, DefaultConfig(), optedIn, done)
	handler := h.fn.HTTPHandler(context.Background(), prometheus.NewRegistry())
	srv := httptest.NewServer(handler)
	defer srv.Close()
	data := string(newEvent(t, done).Data())
	binary := func(typ, id string) map[string]string {
		return map[string]string{"ce-specversion": "1.0", "ce-type": typ, "ce-id": id, "ce-source": testSource,
			"ce-subject": podevent.Subject(done.Namespace, done.Name)}
	}
	cases := map[string]struct {
		contentType, body string
		headers           map[string]string
	}{
		"not a CloudEvent":  {contentType: "text/plain", body: "hello"},
		"binary without id": {contentType: "application/json", body: data, headers: binary(podevent.TypePodUpdated, "")},
		"wrong type":        {contentType: "application/json", body: data, headers: binary("com.example.pod.done", "1")},
		"broken data":       {contentType: "application/json", body: `{"metadata":`, headers: binary(podevent.TypePodUpdated, "1")},
		"oversized data": {contentType: "application/json", headers: binary(podevent.TypePodUpdated, "1"),
			body: strings.Replace(data, `"metadata":{`, `"metadata":{"generateName":"`+strings.Repeat("x", podevent.MaxDataBytes)+`",`, 1)},
		"not JSON": {contentType: "application/xml", body: "<pod/>", headers: binary(podevent.TypePodUpdated, "1")},
		// The SDK's own receiver answered this one 500 (retried forever).
		"broken structured JSON":    {contentType: "application/cloudevents+json", body: `{"specversion":"1.0","id":`},
		"structured, not an object": {contentType: "application/cloudevents+json", body: `[1,2]`},
		"oversized body": {contentType: "application/cloudevents+json",
			body: `{"specversion":"1.0","id":"1","source":"s","type":"` + podevent.TypePodUpdated + `","data":"` + strings.Repeat("x", 2*podevent.MaxDataBytes) + `"}`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", c.contentType)
			authorize(req)
			for k, v := range c.headers {
				if v != "" {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			// Knative retries 404, 408, 409 and 429 (dispatch.Classify too).
			if c := resp.StatusCode; c < 400 || c >= 500 || c == 404 || c == 408 || c == 409 || c == 429 {
				t.Errorf("status %d, want a final 4xx", c)
			}
		})
	}
	// Every rejection is counted, whether or not it decoded as an event.
	var invalid float64
	for _, typ := range []string{"other", podevent.TypePodUpdated} {
		invalid += testutil.ToFloat64(h.metrics.events.WithLabelValues(typ, string(OutcomeInvalid)))
	}
	if invalid != float64(len(cases)) {
		t.Errorf("%v invalid events counted, want %d (one per rejected request)", invalid, len(cases))
	}
	if calls := h.exec.Calls(); len(calls) != 0 {
		t.Fatalf("garbage caused %d execs: %v", len(calls), calls)
	}
	// The same pod through the same handler with a valid event is quit, so
	// the silence above is rejection, not a harness that cannot exec.
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	authorize(req)
	for k, v := range binary(podevent.TypePodUpdated, "1") {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(h.exec.Calls()) != 1 {
		t.Errorf("valid event: status %d, %d execs; want 200 and 1", resp.StatusCode, len(h.exec.Calls()))
	}
}

// heapCost runs f and returns the bytes it allocated and the time it took.
func heapCost(f func()) (uint64, time.Duration) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, elapsed
}

// TestHostileBodiesAreCheap sends, from an authenticated caller, the two
// bodies that used to cost the function most before any API call: 1 MiB of
// empty containers (474 MiB of RSS when decoded into a v1.Pod, over the
// 128 MiB limit) and 250k sidecar names with 38k containers (41 s of CPU).
// Both are refused for a bounded, small cost; a body within the bounds with
// the 250k names is decided in milliseconds. None execs.
func TestHostileBodiesAreCheap(t *testing.T) {
	h := newHarness(t, DefaultConfig(), optedIn)
	url := serve(t, h)
	base := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"` + testNS + `","uid":"u"%s},` +
		`"spec":{"restartPolicy":"Never","containers":[%s]},"status":{"phase":"Running","containerStatuses":[%s]}}`
	names := `,"annotations":{"istio-aux.dev/sidecars":"` + strings.Repeat("x,", 250_000) + `"}`
	list := func(n int, item func(i int) string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(item(i))
		}
		return b.String()
	}
	container := func(i int) string { return `{"name":"c` + strconv.Itoa(i) + `"}` }
	done := func(i int) string { return `{"name":"c` + strconv.Itoa(i) + `","state":{"terminated":{"exitCode":0}}}` }
	bodies := map[string]struct {
		data string
		code int
	}{
		"1 MiB of empty containers":          {fmt.Sprintf(base, "", list((1<<20)/3, func(int) string { return "{}" }), ""), 400},
		"250k sidecar names, 38k containers": {fmt.Sprintf(base, names, list(38_000, func(int) string { return `{"name":"x"}` }), ""), 400},
		// Within every bound: decoded and decided (the 250k names read
		// lazily), then the live pod is read: it does not exist.
		"250k sidecar names, 256 done containers": {fmt.Sprintf(base, names,
			`{"name":"istio-proxy"},`+list(255, container), list(255, done)), 200},
	}
	for name, body := range bodies {
		data := body.data
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(data))
		req.Header.Set("Content-Type", "application/json")
		authorize(req)
		for k, v := range map[string]string{"ce-specversion": "1.0", "ce-type": podevent.TypePodUpdated, "ce-id": "x", "ce-source": "s"} {
			req.Header.Set(k, v)
		}
		var code int
		alloc, took := heapCost(func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			code = resp.StatusCode
			resp.Body.Close()
		})
		t.Logf("%s (%d KiB): %d in %v, %d KiB allocated", name, len(data)>>10, code, took.Round(time.Millisecond), alloc>>10)
		if code != body.code {
			t.Errorf("%s: %d, want %d", name, code, body.code)
		}
		// The body itself is read (at most maxRequestBytes); decoding it
		// must cost little more than that.
		if limit := uint64(4 * maxRequestBytes); alloc > limit {
			t.Errorf("%s: %d KiB allocated, want at most %d KiB", name, alloc>>10, limit>>10)
		}
		if took > 2*time.Second {
			t.Errorf("%s: %v, want well under a second", name, took)
		}
	}
	if n := apiCalls(h, "get", "pods"); n != 1 || len(h.exec.Calls()) != 0 {
		t.Errorf("hostile bodies caused %d pod reads and %d execs, want the one read of the body within bounds", n, len(h.exec.Calls()))
	}
}
