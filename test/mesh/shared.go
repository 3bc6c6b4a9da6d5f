package mesh

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/knative"
	"github.com/istio-aux/istio-aux/test/realnode"
)

// Shared is the one stack of real nodes a suite's tests share (each in
// namespaces of its own): started on first use, istio-aux installed as users
// install it and moved between config/ and config/standalone/ as tests ask.
// The one-node suite (test/node) and the three-node one (test/ha) are two
// values of it. A run serves one shape of cluster: Options, unless its
// first test asks for another (Use).
type Shared struct {
	// Options for Start, the suite's default shape; Node is implied, Log
	// is set from LogName.
	Options Options
	// LogName is the processes' log in /tmp, echoed with $Verbose set.
	LogName, Verbose string
	// Explain logs what explains a failed install, or a failure of the
	// test that installed (istio-aux's own logs, say).
	Explain func(t *testing.T, c *cluster.Cluster)

	once     sync.Once
	m        *Mesh
	err      error
	shape    string // ShapeOf what runs, once started
	opts     Options
	owner    string // the test that chose a shape other than Options (Use)
	log      io.Writer
	closeLog func()
	mu       sync.Mutex
	aux      *istioaux.Installed
	// failed is why an install from a folder failed: the tests that ask
	// for it after fail at once, not each after minutes of its own try
	// (stop 40's CI: eight tests in turn, until the suite's timeout).
	failed map[string]error
}

// Main is the suite's TestMain: it runs the tests inside the nodes' network
// namespace (realnode.RunInNetns) and stops the stack after them.
func (s *Shared) Main(m *testing.M) int {
	return realnode.RunInNetns(func() int {
		code := m.Run()
		if s.m != nil {
			if err := s.m.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping the real nodes' stack:", err)
			}
		}
		if s.closeLog != nil {
			s.closeLog()
		}
		return code
	})
}

// Mesh returns the stack the run serves, starting it with Options on first
// use. It skips the test where the machine cannot host a node (fails it
// with CI=true). In a run whose shape a test chose (Use), only that test
// and its subtests get the stack.
func (s *Shared) Mesh(t *testing.T) *Mesh {
	t.Helper()
	if s.owner != "" && t.Name() != s.owner && !strings.HasPrefix(t.Name(), s.owner+"/") {
		s.refuse(t, s.Options)
	}
	return s.start(t, s.Options)
}

// Use makes o the shape of the stack the run serves, and returns it: a
// test named after a shape (test/node's TestV132) calls it first, and the
// scenarios it runs as its subtests then find that stack through Mesh and
// Installed. A run serves one shape, as the real nodes' addresses and
// ports are the machine's once: if another test of the run has started
// the stack already with another shape, the test is skipped, saying how to
// run it on its own (failed with CI=true, where make e2e runs each shape
// in a run of its own).
func (s *Shared) Use(t *testing.T, o Options) *Mesh {
	t.Helper()
	if s.shape != "" && s.shape != ShapeOf(o) {
		s.refuse(t, o)
	}
	if s.shape == "" && ShapeOf(o) != ShapeOf(s.Options) {
		s.owner = t.Name()
	}
	return s.start(t, o)
}

// refuse skips a test that needs a cluster of shape o in a run that serves
// another (fails it under CI=true).
func (s *Shared) refuse(t *testing.T, o Options) {
	t.Helper()
	msg := fmt.Sprintf("this run's cluster is %s; %s needs %s: run it on its own (go test -run '^%s$')",
		s.shape, t.Name(), ShapeOf(o), strings.SplitN(t.Name(), "/", 2)[0])
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// start starts the stack with o on first use, and returns it.
func (s *Shared) start(t *testing.T, o Options) *Mesh {
	t.Helper()
	realnode.RequireNode(t)
	s.once.Do(func() {
		s.log, s.closeLog = cluster.ProcessLog(s.LogName, s.Verbose)
		o.Node, o.Log = true, s.log
		s.shape, s.opts = ShapeOf(o), o
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		s.m, s.err = Start(ctx, o)
		fmt.Fprintf(os.Stderr, "%s: real nodes, images and istiod up in %s\n", s.shape, time.Since(start).Round(time.Millisecond))
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.m
}

// Log is where the stack's processes write.
func (s *Shared) Log() io.Writer { return s.log }

// Installed is the stack with istio-aux installed from dir (istioaux.Config
// or istioaux.Standalone), moved there from another install as a user
// would move. Tests that ask for another folder than config/ must not be
// parallel.
func (s *Shared) Installed(t *testing.T, dir string) (*Mesh, *istioaux.Installed) {
	t.Helper()
	m := s.Mesh(t)
	if dir == istioaux.Config && s.opts.Platform == "openshift" {
		dir = istioaux.OpenShift // what an OpenShift cluster installs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aux != nil && s.aux.Dir() == dir {
		return m, s.aux
	}
	if err := s.failed[dir]; err != nil {
		t.Fatalf("istio-aux from %s did not install earlier in this run: %v", dir, err)
	}
	// A cold build of the images takes minutes on 2 cores; make e2e warms
	// the build cache first.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var aux *istioaux.Installed
	var err error
	switch {
	case s.aux != nil:
		aux, err = s.aux.Move(ctx, dir)
	case s.opts.Knative:
		err = s.installKnative(ctx, m.Cluster)
	}
	if err == nil && aux == nil {
		aux, err = istioaux.Install(ctx, m.Cluster, dir, s.log)
	}
	if err != nil {
		if s.Explain != nil {
			s.Explain(t, m.Cluster)
		}
		if s.failed == nil {
			s.failed = map[string]error{}
		}
		s.failed[dir] = err
		t.Fatalf("installing istio-aux from %s: %v (pods: %s)", dir, err, m.Cluster.PodsSummary(ctx, istioaux.SystemNamespace, ""))
	}
	s.aux = aux
	t.Cleanup(func() {
		if t.Failed() && s.Explain != nil {
			s.Explain(t, m.Cluster)
		}
	})
	return m, aux
}

// Upgrade rolls the installed istio-aux to new images tagged version, as a
// user applies a new release, and keeps the result as the install.
func (s *Shared) Upgrade(ctx context.Context, version string) (*istioaux.Installed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, err := s.aux.Upgrade(ctx, version)
	if err != nil {
		return nil, err
	}
	s.aux = next
	return next, nil
}

// installKnative installs Knative Serving and its ingress before istio-aux's
// first install (Options.Knative): the newest of the harness's releases
// that starts on the cluster's version. Where none does, config/'s
// function runs as the Deployment Knative would make of it
// (test/istioaux).
func (s *Shared) installKnative(ctx context.Context, c *cluster.Cluster) error {
	r, ok := knative.For(c.Version())
	if !ok {
		oldest := knative.Releases[len(knative.Releases)-1]
		fmt.Fprintf(s.log, "harness| Kubernetes %s: no Knative Serving (the oldest the harness has, %s, needs 1.%d); the function runs as the Deployment Knative would make\n", c.Version(), oldest, oldest.MinKubernetesMinor)
		return nil
	}
	return knative.Install(ctx, c, r, s.log)
}
