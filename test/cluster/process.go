package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/istio-aux/istio-aux/test/poll"
)

// Process is a child process whose output goes, line by line and prefixed
// with its name, to a log: one started by StartProcess or a Cluster's.
type Process struct {
	name  string
	cmd   *exec.Cmd
	done  chan struct{}
	err   error
	grace time.Duration // how long Stop waits after SIGTERM
}

// lockedWriter serialises writes from several processes to one log.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

var logWriters sync.Map // io.Writer -> *lockedWriter

func logFor(w io.Writer) *lockedWriter {
	v, _ := logWriters.LoadOrStore(w, &lockedWriter{w: w})
	return v.(*lockedWriter)
}

// StartProcess runs a command (path, args, env added to the harness's
// environment), prefixing its output with name into log. Tests use it for
// istio-aux's own binaries. Stop waits 10s for it.
func StartProcess(name string, log io.Writer, env []string, path string, args ...string) (*Process, error) {
	return startProcess(name, log, 10*time.Second, env, path, args...)
}

func startProcess(name string, log io.Writer, grace time.Duration, env []string, path string, args ...string) (*Process, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = append(cmd.Environ(), env...)
	// Own process group: a terminal's Ctrl-C reaches only the harness, which
	// then stops clients before the apiserver before etcd (all at once is
	// slow and noisy). Pdeathsig still kills children if the harness dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	lw := logFor(log)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, done: make(chan struct{}), grace: grace}
	go func() {
		s := bufio.NewScanner(pr)
		s.Buffer(make([]byte, 64*1024), 1024*1024)
		for s.Scan() {
			fmt.Fprintf(lw, "%s| %s\n", name, s.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		p.err = cmd.Wait()
		_ = pw.Close()
		close(p.done)
	}()
	return p, nil
}

// Name is the process's name in the log and in Pids.
func (p *Process) Name() string { return p.name }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and why.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, fmt.Errorf("%s exited: %w", p.name, p.err)
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, waits up to 10s (a cluster's process: 15s), then
// kills; it is idempotent.
func (p *Process) Stop() error {
	if dead, _ := p.Exited(); dead {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(p.grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not stop within %s and was killed", p.name, p.grace)
}

// Kill sends SIGKILL (no chance to clean up, as when a node dies or the
// OOM killer strikes) and waits until the process is gone; the chaos tests
// use it. A process that already ended is left alone.
func (p *Process) Kill() error {
	if dead, _ := p.Exited(); dead {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// WaitUp polls ready until it succeeds, failing fast if the process dies.
func (p *Process) WaitUp(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	err := poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		if dead, _ := p.Exited(); dead {
			return true, nil // reported below, without waiting out the timeout
		}
		if err := ready(ctx); err != nil {
			return false, err
		}
		return true, nil
	})
	if dead, perr := p.Exited(); dead {
		return errors.Join(perr, err)
	}
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", p.name, err)
	}
	return nil
}

// stopGrace is how long Stop waits for each of a cluster's processes after
// SIGTERM.
const stopGrace = 15 * time.Second

// StartProcess starts a process of the cluster's, as it starts its own: its
// output goes to the cluster's log, Pids names it, and Stop stops it (in
// reverse start order) unless it was stopped before. A Node starts its
// processes this way.
func (c *Cluster) StartProcess(name string, env []string, path string, args ...string) (*Process, error) {
	p, err := startProcess(name, c.opts.Log, stopGrace, env, path, args...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// Pids maps the name of every process the cluster runs ("etcd",
// "kube-apiserver", "kube-controller-manager", "kwok", and what a Node
// started with StartProcess: "kubelet", "containerd") to its process id,
// for what reads a process's resources from /proc (the benchmarks).
func (c *Cluster) Pids() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.procs))
	for _, p := range c.procs {
		out[p.name] = p.Pid()
	}
	return out
}

// handedOut is every port FreePort has returned in this process. Callers
// pick several ports before any process binds them, and the kernel may give
// a port that was just released to the very next request: a chaos run once
// got NATS's port again as the bridge's metrics port.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that no earlier call in this process has returned.
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[p] {
			handedOut.ports[p] = true
			return p, nil
		}
	}
	return 0, errors.New("no free port that was not already handed out")
}

// FreePorts is n ports FreePort hands out.
func FreePorts(n int) ([]int, error) {
	out := make([]int, n)
	for i := range out {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

func freeAddr() (string, error) {
	p, err := FreePort()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), err
}
