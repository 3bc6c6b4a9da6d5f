package app

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// fastElection is the production election, faster: a Lease counts its
// duration in whole seconds, so one second is as short as it goes.
func fastElection(identity string) Election {
	return Election{Lease: names.WatcherLease, Namespace: "istio-aux", Identity: identity,
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}
}

// replica runs runElected as one bridge replica would, counting how many
// replicas lead at once.
type replica struct {
	name    string
	cancel  context.CancelFunc
	done    chan error
	err     error
	stopped sync.Once
	leading atomic.Bool
}

// stop stops the replica as its process would stop, and waits for it.
func (r *replica) stop() error {
	r.stopped.Do(func() { r.cancel(); r.err = <-r.done })
	return r.err
}

type leaders struct {
	now, most atomic.Int32
	terms     atomic.Int32
}

func startReplica(t *testing.T, cs *fake.Clientset, e Election, lock resourcelock.Interface, l *leaders) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{name: e.Identity, cancel: cancel, done: make(chan error, 1)}
	if lock == nil {
		var err error
		lock, err = resourcelock.New(resourcelock.LeasesResourceLock, e.Namespace, e.Lease, cs.CoreV1(), cs.CoordinationV1(),
			resourcelock.ResourceLockConfig{Identity: e.Identity})
		if err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		r.done <- runElected(ctx, e, lock, r.leading.Store, func(ctx context.Context) error {
			l.terms.Add(1)
			n := l.now.Add(1)
			for {
				most := l.most.Load()
				if n <= most || l.most.CompareAndSwap(most, n) {
					break
				}
			}
			<-ctx.Done()
			// What a watcher does when told to stop takes a moment; the
			// Lease must not be released before it is over.
			time.Sleep(20 * time.Millisecond)
			l.now.Add(-1)
			return nil
		})
	}()
	t.Cleanup(func() { _ = r.stop() })
	return r
}

// never checks that cond stays false for d.
func never(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, d, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err == nil {
		t.Fatal(what)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestOneReplicaWatchesAtATime: of two replicas one leads; when it stops,
// the other takes over at once (the Lease is released, not left to
// expire), and at no moment do two lead.
func TestOneReplicaWatchesAtATime(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	var l leaders
	a := startReplica(t, cs, fastElection("a"), nil, &l)
	waitFor(t, "a leads", a.leading.Load)
	b := startReplica(t, cs, fastElection("b"), nil, &l)
	// b stands by through several of a's renewals.
	never(t, "b led beside a", 3*time.Second, func() bool { return b.leading.Load() || l.now.Load() != 1 })
	stopped := time.Now()
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b takes over", b.leading.Load)
	// Released, a standby takes over within a retry or two; left to
	// expire, it would wait out the lease (2 s).
	if took := time.Since(stopped); took > time.Second {
		t.Errorf("b took over %v after a stopped: the Lease was not released", took)
	}
	if most := l.most.Load(); most != 1 {
		t.Errorf("%d replicas led at once, want 1", most)
	}
}

// failingLock is a Lease lock whose renewals can be made to fail, as when
// its replica is cut off the API server.
type failingLock struct {
	resourcelock.Interface
	mu   sync.Mutex
	fail bool
}

func (f *failingLock) set(fail bool) { f.mu.Lock(); f.fail = fail; f.mu.Unlock() }

func (f *failingLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return errors.New("partitioned")
	}
	return f.Interface.Update(ctx, r)
}

func (f *failingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return nil, nil, errors.New("partitioned")
	}
	return f.Interface.Get(ctx)
}

// TestAPartitionedLeaderStandsDown: a leader that cannot renew stops
// watching within its renew deadline, before the standby may take over;
// once it can reach the API server again it stands by, and leads again
// when the other goes.
func TestAPartitionedLeaderStandsDown(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	var l leaders
	ea := fastElection("a")
	inner, err := resourcelock.New(resourcelock.LeasesResourceLock, ea.Namespace, ea.Lease, cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: "a"})
	if err != nil {
		t.Fatal(err)
	}
	lock := &failingLock{Interface: inner}
	a := startReplica(t, cs, ea, lock, &l)
	waitFor(t, "a leads", a.leading.Load)
	b := startReplica(t, cs, fastElection("b"), nil, &l)
	cut := time.Now()
	lock.set(true)
	waitFor(t, "a stops watching", func() bool { return !a.leading.Load() })
	if took := time.Since(cut); took > ea.LeaseDuration {
		t.Errorf("a watched on for %v after it could no longer renew: past the %v the standby waits", took, ea.LeaseDuration)
	}
	waitFor(t, "b takes over", b.leading.Load)
	lock.set(false)
	never(t, "a took the Lease back from b", 3*time.Second, a.leading.Load)
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a leads again", a.leading.Load)
	if most := l.most.Load(); most != 1 {
		t.Errorf("%d replicas led at once, want 1", most)
	}
	if n := l.terms.Load(); n != 3 {
		t.Errorf("%d terms, want 3 (a, b, a)", n)
	}
}
