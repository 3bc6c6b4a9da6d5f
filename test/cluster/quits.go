package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// Names shared by the kwok Stages (test/kwok), the stub pilot-agent and the
// tests. They drive the fake pods.
const (
	// AnnotationRunFor is how long app containers run per attempt, in
	// seconds with an "s" suffix ("2s", "0s"); default 1s.
	AnnotationRunFor = "test.istio-aux.dev/run-for"
	// AnnotationExitCodes is the apps' exit code per attempt ("1,0": the
	// first attempt exits 1, every later one 0); default "0".
	AnnotationExitCodes = "test.istio-aux.dev/exit-codes"
	// AnnotationProxyQuit is set by the stub pilot-agent when asked to quit;
	// a Stage then terminates istio-proxy with exit code 0.
	AnnotationProxyQuit = "test.istio-aux.dev/proxy-quit"
	// EnvQuitRecord names the file the stub appends one Quit per line to.
	EnvQuitRecord = "ISTIO_AUX_TEST_QUIT_RECORD"
)

// Quit is one `pilot-agent request POST quitquitquit` the stub served.
type Quit struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       string    `json:"uid"`
	Container string    `json:"container,omitempty"`
	Args      []string  `json:"args"`
	Time      time.Time `json:"time"`
}

// Quits reads every quit recorded so far, in order.
func (c *Cluster) Quits() ([]Quit, error) { return ReadQuits(c.quits) }

// ReadQuits parses a quit record file; a missing file is no quits yet.
func ReadQuits(path string) ([]Quit, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Quit
	s := bufio.NewScanner(f)
	for s.Scan() {
		var q Quit
		if err := json.Unmarshal(s.Bytes(), &q); err != nil {
			return out, fmt.Errorf("quit record %s: %w", path, err)
		}
		out = append(out, q)
	}
	return out, s.Err()
}
