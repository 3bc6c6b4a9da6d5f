package cluster

import (
	"context"
	"fmt"
	"time"
)

// Faults of the control plane: its API server or its etcd killed without
// warning (SIGKILL, as the OOM killer or a crashed machine does) and
// started again as it was, with its data dir, flags and certificates.

// RestartAPIServer kills kube-apiserver and starts it again, returning once
// it is ready. Every client's watch breaks; what they do then is theirs.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	return c.restart(ctx, "kube-apiserver", 60*time.Second, c.apiServerReady)
}

// RestartEtcd kills etcd and starts it again on its data dir, returning
// once it is healthy. The API server stays up and answers errors until its
// etcd is back.
func (c *Cluster) RestartEtcd(ctx context.Context) error {
	return c.restart(ctx, "etcd", 30*time.Second, c.etcdReady)
}

// restart SIGKILLs the process named name and starts the same command in
// its place (its place in the stop order too), then waits for ready.
func (c *Cluster) restart(ctx context.Context, name string, timeout time.Duration, ready func(context.Context) error) error {
	c.mu.Lock()
	i := -1
	for j, p := range c.procs {
		if p.name == name {
			i = j
		}
	}
	if i < 0 {
		c.mu.Unlock()
		return fmt.Errorf("no process %s", name)
	}
	old := c.procs[i]
	c.mu.Unlock()
	if err := old.Kill(); err != nil {
		return fmt.Errorf("killing %s: %w", name, err)
	}
	// The environment as it was: startProcess adds it to the harness's,
	// where the later of two values wins.
	p, err := startProcess(name, c.opts.Log, stopGrace, old.cmd.Env, old.cmd.Path, old.cmd.Args[1:]...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs[i] = p
	c.mu.Unlock()
	return p.WaitUp(ctx, timeout, ready)
}
