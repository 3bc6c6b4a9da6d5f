package publish_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/publish"
	"github.com/istio-aux/istio-aux/bridge/stream"
	"github.com/istio-aux/istio-aux/functions/podevent"
)

func event(t *testing.T, name, rv string) cloudevents.Event {
	t.Helper()
	e, err := podevent.New("test", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "jobs", UID: "uid-" + "x", ResourceVersion: rv}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestPublishRecordsAndStores(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartServer(t)
	nc := testenv.Connect(t, srv.URL())
	js, err := publish.NewJetStream(nc, 4)
	if err != nil {
		t.Fatal(err)
	}
	st, err := stream.Ensure(ctx, js, stream.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "rec")
	rec, err := publish.NewRecorder(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.NewBridge(nil)
	p := publish.New(nc, js, m, rec, 4)
	go func() { _ = p.Run(ctx) }()

	results := make(chan error, 3)
	for _, e := range []cloudevents.Event{event(t, "a", "1"), event(t, "b", "2"), event(t, "a", "1")} {
		if err := p.Publish(ctx, &e, "", func(err error) { results <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(m.Deduplicated); got != 1 {
		t.Errorf("deduplicated %v, want 1", got)
	}
	// The stored message is binary mode on the namespace's subject.
	msg, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "istio-aux.pods.jobs" || msg.Header.Get(jetstream.MsgIDHeader) != "uid-x/1" || msg.Header.Get("ce-id") != "uid-x/1" {
		t.Errorf("stored %s with headers %v", msg.Subject, msg.Header)
	}
	// Duplicates are not recorded; files are named <seq>-<ns>-<pod>.json.
	files, _ := os.ReadDir(dir)
	var names []string
	for _, f := range files {
		names = append(names, f.Name())
	}
	if len(names) != 2 || names[0] != "000001-jobs-a.json" || names[1] != "000002-jobs-b.json" {
		t.Fatalf("recorded %v", names)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, names[1]))
	var back cloudevents.Event
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("recording is not a structured-mode event: %v", err)
	}
	if pod, err := podevent.Decode(back); err != nil || pod.Name != "b" {
		t.Errorf("recorded event decodes to %v, %v", pod, err)
	}
}

func TestPublishWhileDisconnected(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartServer(t)
	nc := testenv.Connect(t, srv.URL())
	js, _ := publish.NewJetStream(nc, 4)
	if _, err := stream.Ensure(ctx, js, stream.DefaultName); err != nil {
		t.Fatal(err)
	}
	m := metrics.NewBridge(nil)
	p := publish.New(nc, js, m, nil, 4)
	go func() { _ = p.Run(ctx) }()
	srv.Shutdown()
	testenv.Eventually(t, 5*time.Second, "disconnect", func() bool { return !nc.IsConnected() })
	e := event(t, "a", "1")
	err := p.Publish(ctx, &e, "", func(error) { t.Error("done called for an unsent event") })
	if !errors.Is(err, publish.ErrNotConnected) {
		t.Errorf("Publish while down = %v, want ErrNotConnected", err)
	}
	if got := testutil.ToFloat64(m.PublishErrors.WithLabelValues("publish")); got != 1 {
		t.Errorf("publish errors %v, want 1", got)
	}
}
