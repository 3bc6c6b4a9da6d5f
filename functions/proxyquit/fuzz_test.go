package proxyquit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// FuzzHandle throws arbitrary bytes at decoding and Handle, either as a
// whole structured-mode event or as the data of a well-formed envelope.
// Whatever arrives: no panic, 400 exactly when the contract rejects the
// event, 200 otherwise (no live pod exists), and never an exec.
func FuzzHandle(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(testdata, "*", "*.json"))
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `{"metadata":{}}`, `{"kind":"Service"}`,
		`{"metadata":{"name":"p","namespace":"team-a","uid":"u"},"spec":{"restartPolicy":"Never","containers":[{"name":"istio-proxy"},{"name":"app"}]},"status":{"containerStatuses":[{"name":"app","state":{"terminated":{"exitCode":0}}}]}}`,
		`{"specversion":"1.0","id":"x","source":"s","type":"dev.istio-aux.pod.updated","data":"not a pod"}`,
		`{"specversion":"1.0","id":"x","source":"s","type":"dev.knative.apiserver.resource.delete","data":{}}`,
	} {
		f.Add([]byte(s))
	}
	h := newHarness(f, DefaultConfig(), optedIn) // no pods: every GET is NotFound
	f.Fuzz(func(t *testing.T, raw []byte) {
		var e cloudevents.Event
		if err := json.Unmarshal(raw, &e); err != nil {
			e = cloudevents.NewEvent()
			e.SetID("fuzz")
			e.SetSource("fuzz")
			e.SetType(podevent.TypePodUpdated)
			_ = e.SetData(cloudevents.ApplicationJSON, raw)
		}
		_, decodeErr := podevent.Decode(e)

		res := h.fn.Handle(context.Background(), e)

		want := 200
		if decodeErr != nil {
			want = 400
		}
		if got := codeOf(t, res); got != want {
			t.Errorf("code %d (%v), want %d (decode error: %v)", got, res, want, decodeErr)
		}
		if calls := h.exec.Calls(); len(calls) != 0 {
			t.Fatalf("exec called %v", calls)
		}
	})
}
