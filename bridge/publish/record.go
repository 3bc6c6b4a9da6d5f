package publish

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/istio-aux/istio-aux/functions/podevent"
)

// Recorder writes each published event as structured-mode JSON, one file an
// event named <6-digit seq>-<namespace>-<pod>.json, to record scenarios for
// tests (test/testdata/).
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

// Record writes one event.
func (r *Recorder) Record(e *event.Event) error {
	raw, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", e.ID(), err)
	}
	ns, _ := e.Extensions()[podevent.ExtNamespace].(string)
	name, _ := e.Extensions()[podevent.ExtName].(string)
	r.mu.Lock()
	r.seq++
	file := filepath.Join(r.dir, fmt.Sprintf("%06d-%s-%s.json", r.seq, ns, name))
	r.mu.Unlock()
	if err := os.WriteFile(file, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return nil
}
