//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/poll"
)

// component is one istio-aux process under supervision: like a kubelet, the
// supervisor restarts it whenever it ends (after a short back-off when it
// crashed by itself, after the chosen delay when chaos killed it). Ports
// stay the same across restarts, as a Service's would.
type component struct {
	name   string
	bin    string
	env    []string
	args   []string
	health string // URL answering 200 once the process is ready; "" none
	log    io.Writer

	mu      sync.Mutex
	proc    *cluster.Process
	delay   time.Duration // before the next restart, set by kill
	killed  bool          // the current exit was ours
	kills   int
	crashes int // exits we did not cause (e.g. a start while NATS is down)
	starts  int
}

func (c *component) start() error {
	p, err := cluster.StartProcess(c.name, c.log, c.env, c.bin, c.args...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.proc = p
	c.starts++
	c.mu.Unlock()
	return nil
}

// supervise restarts c until ctx is done, then stops it gracefully.
func (c *component) supervise(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.mu.Lock()
			p := c.proc
			c.mu.Unlock()
			_ = p.Stop()
			return
		case <-t.C:
		}
		c.mu.Lock()
		p := c.proc
		c.mu.Unlock()
		if dead, err := p.Exited(); !dead {
			continue
		} else {
			c.mu.Lock()
			delay := c.delay
			if !c.killed {
				c.crashes++
				delay = time.Second // a kubelet's first crash back-off is 10 s; we are in a hurry
				fmt.Fprintf(c.log, "chaos| %s crashed (%v); restarting in %s\n", c.name, err, delay)
			}
			c.killed, c.delay = false, 0
			c.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			if err := c.start(); err != nil {
				fmt.Fprintf(c.log, "chaos| restarting %s: %v\n", c.name, err)
			}
		}
	}
}

// kill SIGKILLs c; the supervisor restarts it after delay.
func (c *component) kill(delay time.Duration) {
	c.mu.Lock()
	p := c.proc
	c.killed, c.delay = true, delay
	c.kills++
	c.mu.Unlock()
	fmt.Fprintf(c.log, "chaos| SIGKILL %s, restart in %s\n", c.name, delay)
	_ = p.Kill()
}

// ready polls c's health URL.
func (c *component) ready(ctx context.Context, timeout time.Duration) error {
	return poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.health, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// counts returns kills, crashes and starts so far.
func (c *component) counts() (kills, crashes, starts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kills, c.crashes, c.starts
}

// stack is istio-aux split into processes: NATS, bridge, dispatcher,
// function. The bridge is optional (the garbage test feeds NATS itself).
type stack struct {
	nats, bridge, dispatch, function *component
	natsURL, functionURL             string
	token                            string // the file holding the dispatcher's token
	dispatchMetrics                  string
	cancel                           context.CancelFunc
	wg                               sync.WaitGroup
}

// all is every component that runs, in start order.
func (s *stack) all() []*component {
	var out []*component
	for _, c := range []*component{s.nats, s.function, s.dispatch, s.bridge} {
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}

func freePort(t *testing.T) string {
	t.Helper()
	p, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(p)
}

// startStack starts NATS, the function, the dispatcher and (withBridge)
// the bridge as supervised processes, waits until each is ready, and stops
// them all when the test ends.
func startStack(t *testing.T, withBridge bool) *stack {
	t.Helper()
	dir := t.TempDir()
	natsPort, fnPort, dispMetrics, bridgeMetrics := freePort(t), freePort(t), freePort(t), freePort(t)
	token, err := istioaux.CallerToken(context.Background(), env.Client(), dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{
		token:           token,
		natsURL:         "nats://127.0.0.1:" + natsPort,
		functionURL:     "http://127.0.0.1:" + fnPort,
		dispatchMetrics: "http://127.0.0.1:" + dispMetrics + "/metrics",
	}
	s.nats = &component{name: "nats", log: logOut,
		bin:    istioaux.MustBuild(t, "github.com/nats-io/nats-server/v2", "nats-server"),
		args:   []string{"-a", "127.0.0.1", "-p", natsPort, "-js", "-sd", filepath.Join(dir, "jetstream"), "-n", "istio-aux-chaos"},
		health: "",
	}
	s.function = &component{name: "function", log: logOut,
		bin:    istioaux.MustBuild(t, "./functions/proxyquit/cmd/proxyquit", "proxyquit"),
		env:    []string{"KUBECONFIG=" + env.Kubeconfig(), "PORT=" + fnPort},
		health: s.functionURL + "/healthz",
	}
	// The function listens on ":PORT"; tests reach it on loopback only.
	bridgeBin := istioaux.MustBuild(t, "./bridge/cmd/bridge", "bridge")
	common := []string{"KUBECONFIG=" + env.Kubeconfig(), "NATS_URL=" + s.natsURL,
		"POD_NAMESPACE=" + istioaux.SystemNamespace, "SYSTEM_NAMESPACE=" + istioaux.SystemNamespace}
	s.dispatch = &component{name: "dispatch", log: logOut, bin: bridgeBin,
		env: append([]string{"ISTIO_AUX_ROLE=dispatch", "K_SINK=" + s.functionURL, "ISTIO_AUX_SINK_TOKEN_FILE=" + token,
			"METRICS_ADDR=127.0.0.1:" + dispMetrics}, common...),
		health: "http://127.0.0.1:" + dispMetrics + "/readyz",
	}
	if withBridge {
		s.bridge = &component{name: "bridge", log: logOut, bin: bridgeBin,
			env:    append([]string{"ISTIO_AUX_ROLE=bridge", "METRICS_ADDR=127.0.0.1:" + bridgeMetrics}, common...),
			health: "http://127.0.0.1:" + bridgeMetrics + "/readyz",
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	t.Cleanup(s.stop)
	for _, c := range s.all() {
		if err := c.start(); err != nil {
			t.Fatal(err)
		}
		s.wg.Add(1)
		go c.supervise(ctx, &s.wg)
		if c == s.nats {
			if err := waitTCP(ctx, "127.0.0.1:"+natsPort, 30*time.Second); err != nil {
				t.Fatalf("nats-server: %v", err)
			}
			continue
		}
		if err := c.ready(ctx, 60*time.Second); err != nil {
			t.Fatalf("%s not ready: %v", c.name, err)
		}
	}
	return s
}

// stop ends supervision and stops every process (bridge first, NATS last).
func (s *stack) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.wg.Wait()
	s.cancel = nil
}
