package record

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"k8s.io/apimachinery/pkg/types"

	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

func TestRecorderWritesEachEvent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rec")
	rec, err := NewRecorder(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		e, err := podevent.New("test", &slim.Pod{Meta: slim.Meta{Name: name, Namespace: "jobs", UID: types.UID("uid-" + name), ResourceVersion: "1"}})
		if err != nil {
			t.Fatal(err)
		}
		var got = os.ErrInvalid
		if err := rec.Publish(context.Background(), &e, "", func(err error) { got = err }); err != nil || got != nil {
			t.Fatalf("Publish = %v, done(%v)", err, got)
		}
	}
	// Files are named <seq>-<ns>-<pod>.json, in publish order.
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
