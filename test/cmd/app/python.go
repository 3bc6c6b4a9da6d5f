package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The app installed as `python` (the image test/images.Python) runs the
// training scripts Kubeflow's examples run, unchanged but for the image:
//
//	python [-u] mnist.py           a TFJob worker: TF_CONFIG names the group
//	python [-u] train.py           a PyTorchJob replica (MASTER_ADDR, MASTER_PORT,
//	                               RANK, WORLD_SIZE) or a TrainJob node (the same
//	                               as PET_MASTER_ADDR, PET_MASTER_PORT,
//	                               PET_NODE_RANK, PET_NNODES)
//	python wait-for HOST --tries=N the PyTorchJob workers' init container: wait
//	                               until the master's name resolves
//
// A worker behaves as the app does (the APP_* environment: download through
// the proxy, attempts, exit codes) and, before it trains, joins its group
// the way distributed training does: every member must reach the others
// by their names through the cluster's DNS. A failing attempt fails before
// joining, as a script that crashes at start.

// joinTimeout bounds the wait for the rest of the group.
const joinTimeout = 3 * time.Minute

// python runs the app as `python args...`; it returns the exit code.
func python(args []string, getenv func(string) string) int {
	if len(args) > 0 && args[0] == "wait-for" {
		host, tries, err := waitForArgs(args[1:])
		if err != nil {
			fmt.Println("python wait-for:", err)
			return 2
		}
		return waitFor(host, tries, time.Second)
	}
	g, err := groupFor(args, getenv)
	cfg, cfgErr := configFrom(getenv)
	if err = errors.Join(err, cfgErr); err != nil {
		fmt.Println("python:", err)
		return 2
	}
	cfg.join = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), joinTimeout)
		defer cancel()
		return rendezvous(ctx, g)
	}
	fmt.Printf("python: %s\n", g)
	return run(cfg, httpClient(), time.Sleep)
}

// groupFor reads the script's training group from the environment its
// operator sets.
func groupFor(args []string, getenv func(string) string) (group, error) {
	script := ""
	for _, a := range args {
		if !strings.HasPrefix(a, "-") { // -u (unbuffered) and the like change nothing here
			script = a
			break
		}
	}
	if script == "" {
		return group{}, fmt.Errorf("no script given (want mnist.py or train.py)")
	}
	switch filepath.Base(script) {
	case "mnist.py":
		return tfGroup(getenv("TF_CONFIG"))
	case "train.py":
		return torchGroup(getenv)
	default:
		return group{}, fmt.Errorf("unknown script %q (want mnist.py or train.py)", script)
	}
}

// group is one member's view of its training group: whom it must reach,
// where it listens, and how many others must reach it.
type group struct {
	self   string   // this member's name, as it says hello
	listen string   // address to serve ("": none)
	dial   []string // host:port of every member it must reach
	expect int      // how many distinct members must reach it
}

func (g group) String() string {
	return fmt.Sprintf("member %s, listening on %q, reaching %v, awaiting %d", g.self, g.listen, g.dial, g.expect)
}

// tfConfig is the part of TF_CONFIG a worker reads.
type tfConfig struct {
	Cluster map[string][]string `json:"cluster"`
	Task    struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	} `json:"task"`
}

// tfGroup: every member of the TF cluster reaches every other by the
// address TF_CONFIG gives it, and listens on the port of its own entry.
func tfGroup(raw string) (group, error) {
	if raw == "" {
		return group{}, fmt.Errorf("TF_CONFIG is not set")
	}
	var c tfConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return group{}, fmt.Errorf("TF_CONFIG: %w", err)
	}
	own := c.Cluster[c.Task.Type]
	if c.Task.Index < 0 || c.Task.Index >= len(own) {
		return group{}, fmt.Errorf("TF_CONFIG: task %s %d is not in the cluster %v", c.Task.Type, c.Task.Index, c.Cluster)
	}
	self := own[c.Task.Index]
	_, port, err := net.SplitHostPort(self)
	if err != nil {
		return group{}, fmt.Errorf("TF_CONFIG: own address %q: %w", self, err)
	}
	g := group{self: self, listen: ":" + port}
	for _, addrs := range c.Cluster {
		for _, a := range addrs {
			if a != self {
				g.dial = append(g.dial, a)
				g.expect++
			}
		}
	}
	return g, nil
}

// torchGroup: rank 0 (the master) listens on the master port until every
// other rank has reached it; the others reach it by its name.
func torchGroup(getenv func(string) string) (group, error) {
	get := func(names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	addr, port := get("MASTER_ADDR", "PET_MASTER_ADDR"), get("MASTER_PORT", "PET_MASTER_PORT")
	rank, err := strconv.Atoi(get("RANK", "PET_NODE_RANK"))
	if err != nil || addr == "" || port == "" {
		return group{}, fmt.Errorf("MASTER_ADDR %q, MASTER_PORT %q, RANK: %w (or their PET_ forms): want all three", addr, port, err)
	}
	world, err := strconv.Atoi(get("WORLD_SIZE", "PET_NNODES"))
	if err != nil || world < 1 || rank < 0 || rank >= world {
		return group{}, fmt.Errorf("rank %d of WORLD_SIZE/PET_NNODES %q: want 0 <= rank < size", rank, get("WORLD_SIZE", "PET_NNODES"))
	}
	g := group{self: "rank-" + strconv.Itoa(rank)}
	if rank == 0 {
		g.listen, g.expect = ":"+port, world-1
	} else {
		g.dial = []string{net.JoinHostPort(addr, port)}
	}
	return g, nil
}

// waitForArgs parses `HOST --tries=N`.
func waitForArgs(args []string) (string, int, error) {
	host, tries := "", 100
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--tries="); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return "", 0, fmt.Errorf("--tries=%q: want a positive number", v)
			}
			tries = n
		} else if host == "" && !strings.HasPrefix(a, "-") {
			host = a
		} else {
			return "", 0, fmt.Errorf("unexpected argument %q (want HOST --tries=N)", a)
		}
	}
	if host == "" {
		return "", 0, fmt.Errorf("no host given (want HOST --tries=N)")
	}
	return host, tries, nil
}

// waitFor resolves host up to tries times, interval apart: the PyTorch
// operator's init container waits so for the master's Service.
func waitFor(host string, tries int, interval time.Duration) int {
	for i := 1; i <= tries; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		cancel()
		if err == nil {
			fmt.Printf("python wait-for: %s resolves to %v (try %d)\n", host, addrs, i)
			return 0
		}
		if i == tries {
			fmt.Printf("python wait-for: %s did not resolve in %d tries: %v\n", host, tries, err)
			break
		}
		time.Sleep(interval)
	}
	return 1
}
