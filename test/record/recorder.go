package record

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// Recorder is a bridge publisher (watch.Publisher) that writes each event
// as structured-mode JSON, one file an event named
// <6-digit seq>-<namespace>-<pod>.json, to record scenarios for tests
// (test/testdata/). It stands where the JetStream publisher stands in the
// bridge, so what it records is exactly what the bridge would publish.
type Recorder struct {
	dir string
	mu  sync.Mutex
	seq int
}

// NewRecorder creates dir if needed.
func NewRecorder(dir string) (*Recorder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("record dir: %w", err)
	}
	return &Recorder{dir: dir}, nil
}

// Publish records e and reports the outcome to done at once.
func (r *Recorder) Publish(_ context.Context, e *event.Event, _ string, done func(error)) error {
	raw, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		done(fmt.Errorf("encoding %s: %w", e.ID(), err))
		return nil
	}
	ns, _ := e.Extensions()[podevent.ExtNamespace].(string)
	name, _ := e.Extensions()[podevent.ExtName].(string)
	r.mu.Lock()
	r.seq++
	file := filepath.Join(r.dir, fmt.Sprintf("%06d-%s-%s.json", r.seq, ns, name))
	r.mu.Unlock()
	if err := os.WriteFile(file, append(raw, '\n'), 0o644); err != nil {
		done(fmt.Errorf("writing %s: %w", file, err))
		return nil
	}
	done(nil)
	return nil
}
