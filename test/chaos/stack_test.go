//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
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
	name, bin string
	env, args []string
	ready     func(context.Context) error // nil once it serves

	mu      sync.Mutex
	proc    *cluster.Process
	delay   time.Duration // before the next restart, set by kill
	killed  bool          // the current exit was ours
	kills   int
	crashes int // exits we did not cause (e.g. a start while NATS is down)
	starts  int
}

func (c *component) start() error {
	p, err := cluster.StartProcess(c.name, logOut, c.env, c.bin, c.args...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.proc = p
	c.starts++
	return nil
}

func (c *component) current() *cluster.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc
}

// supervise restarts c until ctx is done, then stops it gracefully.
func (c *component) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			_ = c.current().Stop()
			return
		case <-time.After(50 * time.Millisecond):
		}
		dead, err := c.current().Exited()
		if !dead {
			continue
		}
		c.mu.Lock()
		delay := c.delay
		if !c.killed {
			c.crashes++
			delay = time.Second // a kubelet's first crash back-off is 10 s; we are in a hurry
			fmt.Fprintf(logOut, "chaos| %s crashed (%v); restarting in %s\n", c.name, err, delay)
		}
		c.killed, c.delay = false, 0
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		if err := c.start(); err != nil {
			fmt.Fprintf(logOut, "chaos| restarting %s: %v\n", c.name, err)
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
	fmt.Fprintf(logOut, "chaos| SIGKILL %s, restart in %s\n", c.name, delay)
	_ = p.Kill()
}

func (c *component) waitReady(ctx context.Context, timeout time.Duration) error {
	return poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		err := c.ready(ctx)
		return err == nil, err
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
	nats, bridge, dispatch, function      *component
	natsURL, functionURL, dispatchMetrics string
	token                                 string // the file holding the dispatcher's token
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

// startStack starts NATS, the function, the dispatcher and (withBridge)
// the bridge as supervised processes, waits until each is ready, and stops
// them all when the test ends.
func startStack(t *testing.T, withBridge bool) *stack {
	t.Helper()
	dir := t.TempDir()
	ports, err := cluster.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	token, err := istioaux.CallerToken(context.Background(), env.Client(), dir)
	if err != nil {
		t.Fatal(err)
	}
	// The function listens on ":PORT"; tests reach it on loopback only.
	s := &stack{token: token, natsURL: "nats://" + addr(0), functionURL: "http://" + addr(1),
		dispatchMetrics: "http://" + addr(2) + "/metrics"}
	s.nats = &component{name: "nats", bin: istioaux.MustBuild(t, "github.com/nats-io/nats-server/v2", "nats-server"),
		args: []string{"-a", "127.0.0.1", "-p", strconv.Itoa(ports[0]), "-js", "-sd", filepath.Join(dir, "jetstream"), "-n", "istio-aux-chaos"},
		ready: func(ctx context.Context) error {
			conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr(0))
			if err == nil {
				conn.Close()
			}
			return err
		},
	}
	s.function = &component{name: "function", bin: istioaux.MustBuild(t, "./functions/proxyquit/cmd/proxyquit", "proxyquit"),
		env:   []string{"KUBECONFIG=" + env.Kubeconfig(), "PORT=" + strconv.Itoa(ports[1])},
		ready: getOK(s.functionURL + "/healthz"),
	}
	bridgeBin := istioaux.MustBuild(t, "./bridge/cmd/bridge", "bridge")
	common := []string{"KUBECONFIG=" + env.Kubeconfig(), "NATS_URL=" + s.natsURL,
		"POD_NAMESPACE=" + istioaux.SystemNamespace, "SYSTEM_NAMESPACE=" + istioaux.SystemNamespace}
	s.dispatch = &component{name: "dispatch", bin: bridgeBin,
		env: append([]string{"ISTIO_AUX_ROLE=dispatch", "K_SINK=" + s.functionURL, "ISTIO_AUX_SINK_TOKEN_FILE=" + token,
			"METRICS_ADDR=" + addr(2)}, common...),
		ready: getOK("http://" + addr(2) + "/readyz"),
	}
	if withBridge {
		s.bridge = &component{name: "bridge", bin: bridgeBin,
			env:   append([]string{"ISTIO_AUX_ROLE=bridge", "METRICS_ADDR=" + addr(3)}, common...),
			ready: getOK("http://" + addr(3) + "/readyz"),
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	for _, c := range s.all() {
		if err := c.start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { c.supervise(ctx) })
		if err := c.waitReady(ctx, time.Minute); err != nil {
			t.Fatalf("%s not ready: %v", c.name, err)
		}
	}
	return s
}

func getOK(url string) func(context.Context) error {
	return func(ctx context.Context) error { return cluster.GetOK(ctx, url) }
}

// quits is the stub pilot-agent's record.
func quits(t *testing.T) []cluster.Quit {
	t.Helper()
	all, err := env.Quits()
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func byUID(quits []cluster.Quit) map[string][]cluster.Quit {
	out := map[string][]cluster.Quit{}
	for _, q := range quits {
		out[q.UID] = append(out[q.UID], q)
	}
	return out
}

// scrape sums the samples of metric name whose labels include every
// `key="value"` given; 0 when there are none.
func scrape(t *testing.T, url, name string, labels ...string) float64 {
	t.Helper()
	sum, err := cluster.Scrape(context.Background(), url, name, labels...)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	return sum
}

// table prints rows of two columns, aligned.
func table(w io.Writer, title string, rows [][2]string) {
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	fmt.Fprintf(w, "--- %s ---\n", title)
	for _, r := range rows {
		fmt.Fprintf(w, "%-*s  %s\n", width, r[0], r[1])
	}
}
