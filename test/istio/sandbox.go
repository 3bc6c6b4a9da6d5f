//go:build linux

package istio

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Sandbox is a pod-like place on this host for the real pilot-agent: a
// network namespace of its own and a directory laid out like the proxy
// container's filesystem. pilot-agent resolves its files (bootstrap
// template, workload certificates, the Envoy config it writes, its
// sockets) relative to its working directory, so the directory stands in
// for the container's root.
type Sandbox struct {
	// Dir is the sandbox's root, every command's working directory.
	Dir string
	ns  *netns
	log io.Writer
}

// NewSandbox creates the namespace and the directory with files (paths
// relative to the root, mode 0644, parents created). log receives every
// command's output, each line prefixed with its name. Needs root.
func NewSandbox(files map[string][]byte, log io.Writer) (_ *Sandbox, err error) {
	dir, err := os.MkdirTemp("", "istio-aux-sandbox-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	for name, data := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return nil, err
		}
	}
	ns, err := newNetns()
	if err != nil {
		return nil, err
	}
	return &Sandbox{Dir: dir, ns: ns, log: log}, nil
}

// Close ends the namespace's thread, which kills every command still
// running (their parent-death signal follows the thread that started
// them), and removes the directory.
func (s *Sandbox) Close() error {
	s.ns.close()
	return os.RemoveAll(s.Dir)
}

// Command is a process started in a sandbox.
type Command struct {
	Name    string
	Started time.Time

	cmd  *exec.Cmd
	done chan struct{}
	out  *lines
	end  time.Time
	err  error
}

// Start runs path with args in the sandbox (its namespace and its root as
// working directory), with env added to this process's environment.
func (s *Sandbox) Start(name string, env []string, path string, args ...string) (*Command, error) {
	c := &Command{Name: name, done: make(chan struct{}), out: &lines{}}
	c.cmd = exec.Command(path, args...)
	c.cmd.Dir = s.Dir
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// The output goes to a pipe of our own rather than through exec's
	// copying, so Wait returns when the command itself exits: a child it
	// leaves behind (pilot-agent's Envoy after "exiting immediately") must
	// not move the exit time, nor fail Wait with exec.ErrWaitDelay.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	c.cmd.Stdout, c.cmd.Stderr = pw, pw
	s.ns.run(func() { err = c.cmd.Start() })
	_ = pw.Close() // the command holds its own copy
	if err != nil {
		_ = pr.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c.Started = time.Now()
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			c.out.add(sc.Text())
			if s.log != nil {
				fmt.Fprintf(s.log, "%s| %s\n", name, sc.Text())
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		c.err = c.cmd.Wait()
		c.end = time.Now()
		// As in a container whose main process ended: what it left
		// behind in its process group goes too, which closes the pipe.
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-scanned: // every line is in Output once Wait returns
		case <-time.After(5 * time.Second):
			// Something outside the group still holds the pipe.
		}
		_ = pr.Close()
		close(c.done)
	}()
	return c, nil
}

// Run starts a command and waits up to timeout for its exit code.
func (s *Sandbox) Run(name string, timeout time.Duration, env []string, path string, args ...string) (*Command, int, error) {
	c, err := s.Start(name, env, path, args...)
	if err != nil {
		return nil, -1, err
	}
	code, err := c.Wait(timeout)
	return c, code, err
}

// Wait waits up to timeout for the exit and returns the exit code; a
// command still running after timeout is killed and reported.
func (c *Command) Wait(timeout time.Duration) (int, error) {
	select {
	case <-c.done:
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		return -1, fmt.Errorf("%s still running after %s; killed", c.Name, timeout)
	}
	var exit *exec.ExitError
	if c.err != nil && !errors.As(c.err, &exit) {
		return -1, c.err
	}
	return c.cmd.ProcessState.ExitCode(), nil
}

// Ran is how long the command ran; zero while it runs.
func (c *Command) Ran() time.Duration {
	select {
	case <-c.done:
		return c.end.Sub(c.Started)
	default:
		return 0
	}
}

// Signal sends sig to the command.
func (c *Command) Signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }

// Output is every line the command printed so far.
func (c *Command) Output() string { return c.out.String() }

// Printed reports whether a line so far contains s.
func (c *Command) Printed(s string) bool { return strings.Contains(c.out.String(), s) }

// Stop kills the command if it still runs.
func (c *Command) Stop() {
	select {
	case <-c.done:
	default:
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
	l.b.WriteByte('\n')
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
