package proxyquit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// TestRemoteExecerRequests checks what RemoteExecer asks the API server
// for: the pods/exec subresource of the right pod, container and argv (no
// shell), WebSocket (GET) first and SPDY (POST) when the upgrade is
// refused, and a clear error when both are.
func TestRemoteExecerRequests(t *testing.T) {
	type req struct {
		method, path, container string
		command                 []string
	}
	var (
		mu   sync.Mutex
		seen []req
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, req{r.Method, r.URL.Path, r.URL.Query().Get("container"), r.URL.Query()["command"]})
		mu.Unlock()
		http.Error(w, "exec is not allowed here", http.StatusForbidden)
	}))
	defer srv.Close()

	ex, err := NewRemoteExecer(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"pilot-agent", "request", "POST", "quitquitquit"}
	_, err = ex.Exec(context.Background(), "team-a", "job-1", "istio-proxy", argv)
	if err == nil || !strings.Contains(err.Error(), "team-a/job-1") {
		t.Fatalf("Exec error = %v, want one naming the pod", err)
	}

	mu.Lock()
	defer mu.Unlock()
	var methods []string
	for _, r := range seen {
		methods = append(methods, r.method)
		if r.path != "/api/v1/namespaces/team-a/pods/job-1/exec" || r.container != "istio-proxy" || !slices.Equal(r.command, argv) {
			t.Errorf("request %+v, want pods/exec of team-a/job-1 in istio-proxy with %v", r, argv)
		}
	}
	if !slices.Equal(methods, []string{"GET", "POST"}) {
		t.Errorf("methods %v, want WebSocket GET then SPDY POST", methods)
	}
}

func TestBoundedBuffer(t *testing.T) {
	var b boundedBuffer
	chunk := strings.Repeat("x", 1000)
	for range 10 {
		if n, err := b.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write = %d, %v; want the whole chunk accepted", n, err)
		}
	}
	if got := len(b.String()); got != maxOutput {
		t.Errorf("kept %d bytes, want %d", got, maxOutput)
	}
}
