package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// rendezvous joins the group g: it serves g.listen until g.expect distinct
// members have said hello, and says hello to every address of g.dial
// (resolving it through the pod's DNS and retrying until it answers), both
// before ctx ends. A member leaves only once it has heard from all it waits
// for, so no one it must reach has gone before it is reached: distributed
// training's collective start, over plain TCP.
func rendezvous(ctx context.Context, g group) error {
	heard := newRoster(g.expect)
	if g.listen != "" {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", g.listen)
		if err != nil {
			return err
		}
		defer ln.Close()
		go accept(ln, g.self, heard)
	}
	reached := newRoster(len(g.dial))
	eg, ctx := errgroup.WithContext(ctx)
	for _, addr := range g.dial {
		eg.Go(func() error {
			err := hello(ctx, addr, g.self)
			if err == nil {
				reached.add(addr)
			}
			return err
		})
	}
	eg.Go(func() error {
		select {
		case <-heard.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err := eg.Wait(); err != nil {
		return fmt.Errorf("the group did not form: reached %v of %v, heard from %v of %d: %w",
			reached.names(), g.dial, heard.names(), g.expect, err)
	}
	fmt.Printf("app: joined the group: reached %d, heard from %v\n", len(g.dial), heard.names())
	return nil
}

// roster counts the distinct members that said hello.
type roster struct {
	mu   sync.Mutex
	seen map[string]bool
	want int
	done chan struct{}
}

func newRoster(want int) *roster {
	r := &roster{seen: map[string]bool{}, want: want, done: make(chan struct{})}
	if want == 0 {
		close(r.done)
	}
	return r
}

func (r *roster) add(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[name] {
		return
	}
	r.seen[name] = true
	if len(r.seen) == r.want {
		close(r.done)
	}
}

func (r *roster) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for n := range r.seen {
		out = append(out, n)
	}
	return out
}

// accept answers every hello on ln with its own name until ln is closed.
func accept(ln net.Listener, self string, heard *roster) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			line, err := bufio.NewReader(conn).ReadString('\n')
			name, ok := strings.CutPrefix(strings.TrimSpace(line), "hello ")
			if err != nil || !ok || name == "" {
				return
			}
			if _, err := fmt.Fprintf(conn, "ok %s\n", self); err == nil {
				heard.add(name)
			}
		}()
	}
}

// hello reaches addr and says hello until it is answered or ctx ends.
func hello(ctx context.Context, addr, self string) error {
	if err := retry(ctx, 500*time.Millisecond, func() error { return helloOnce(ctx, addr, self) }); err != nil {
		return fmt.Errorf("reaching %s: %w (last: %w)", addr, ctx.Err(), err)
	}
	fmt.Printf("app: reached %s\n", addr)
	return nil
}

// retry calls try every interval until it succeeds or ctx ends, and
// returns its last error. (Not test/poll: the app stays free of
// Kubernetes' modules, which would slow its image's build.)
func retry(ctx context.Context, interval time.Duration, try func() error) error {
	for {
		err := try()
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(interval):
		}
	}
}

func helloOnce(ctx context.Context, addr, self string) error {
	conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "hello %s\n", self); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "ok ") {
		return errors.New("unexpected answer " + strings.TrimSpace(line))
	}
	return nil
}
