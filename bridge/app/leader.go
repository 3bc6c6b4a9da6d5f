package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// Election is who may watch: exactly one replica at a time, the holder of a
// Lease (docs/design.md, "Many nodes"). Every replica dispatches whether it
// holds the Lease or not.
type Election struct {
	// Lease names the Lease (ISTIO_AUX_LEASE); "" turns election off: the
	// process always watches, as one replica must then be the only one.
	Lease string
	// Namespace is the Lease's (SYSTEM_NAMESPACE).
	Namespace string
	// Identity is this replica's name in the Lease (POD_NAME, else the
	// host name).
	Identity string
	// The Lease's timings: a standby takes over at most LeaseDuration after
	// the holder's last renewal; the holder stops watching once it could
	// not renew for RenewDeadline; renewals and attempts are RetryPeriod
	// apart. client-go's (and kube-scheduler's) defaults.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultElection is the election's production timing.
func DefaultElection() Election {
	// Both install shapes stand for the same Lease: the bridges of config/
	// and the all-in-ones of config/standalone/, so moving between the
	// shapes never runs two watchers.
	return Election{Lease: names.WatcherLease, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
}

// The keys of config-leader-election the watcher's Lease reads: knative's
// own (knative.dev/pkg/leaderelection), so that one ConfigMap tunes every
// election of the install. knative's buckets key is the webhook's alone.
const (
	KeyLeaseDuration = "lease-duration"
	KeyRenewDeadline = "renew-deadline"
	KeyRetryPeriod   = "retry-period"
)

// WithTimings is e with the timings data (config-leader-election's data)
// sets; a key it lacks keeps e's. The result is checked as client-go's
// elector would check it, with the keys named.
func (e Election) WithTimings(data map[string]string) (Election, error) {
	if err := configmap.Parse(data,
		configmap.AsDuration(KeyLeaseDuration, &e.LeaseDuration),
		configmap.AsDuration(KeyRenewDeadline, &e.RenewDeadline),
		configmap.AsDuration(KeyRetryPeriod, &e.RetryPeriod)); err != nil {
		return e, fmt.Errorf("%s: %w", names.LeaderElectionConfigMap, err)
	}
	return e, e.checkTimings()
}

// checkTimings holds what client-go's NewLeaderElector requires: a renew
// deadline past the retry period's jitter, and a lease past the renew
// deadline (else a standby could take the Lease while its holder still
// watches).
func (e Election) checkTimings() error {
	switch jittered := time.Duration(leaderelection.JitterFactor * float64(e.RetryPeriod)); {
	case e.RetryPeriod <= 0:
		return fmt.Errorf("%s: %s=%v: want a positive duration", names.LeaderElectionConfigMap, KeyRetryPeriod, e.RetryPeriod)
	case e.RenewDeadline <= jittered:
		return fmt.Errorf("%s: %s=%v: want more than %s × %.1f (%v)", names.LeaderElectionConfigMap,
			KeyRenewDeadline, e.RenewDeadline, KeyRetryPeriod, leaderelection.JitterFactor, jittered)
	case e.LeaseDuration <= e.RenewDeadline:
		return fmt.Errorf("%s: %s=%v: want more than %s (%v)", names.LeaderElectionConfigMap,
			KeyLeaseDuration, e.LeaseDuration, KeyRenewDeadline, e.RenewDeadline)
	}
	return nil
}

// configMapReader reads one ConfigMap (internal/kube's Client).
type configMapReader interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
}

// timingsAtStart is e with config-leader-election's timings, read once as
// the process starts (as knative's sharedmain reads them for the webhook):
// a change takes a restart. No ConfigMap, or one the process may not read
// (an older install's RBAC), leaves the defaults, the latter with a
// warning; values the elector would refuse are an error, so that the
// process stops with the key named rather than electing wrongly.
func timingsAtStart(ctx context.Context, e Election, cms configMapReader) (Election, error) {
	cm, err := cms.ConfigMap(ctx, e.Namespace, names.LeaderElectionConfigMap)
	switch {
	case apierrors.IsNotFound(err):
		return e, nil
	case err != nil:
		logging.FromContext(ctx).Warnw("The watcher's Lease keeps its default timings: "+names.LeaderElectionConfigMap+" is unreadable",
			zap.String("namespace", e.Namespace), zap.Error(err))
		return e, nil
	}
	return e.WithTimings(cm.Data)
}

// lockFor is the Lease lock for e, with a client whose requests give up
// halfway through the renew deadline, so that one hung request cannot cost
// the Lease.
func lockFor(e Election, rc *rest.Config) (resourcelock.Interface, error) {
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, e.Namespace, e.Lease,
		resourcelock.ResourceLockConfig{Identity: e.Identity}, rc, e.RenewDeadline)
	if err != nil {
		return nil, fmt.Errorf("lease %s/%s: %w", e.Namespace, e.Lease, err)
	}
	return lock, nil
}

// runElected runs lead for as long as this replica holds the Lease, and
// stands again each time it loses it, until ctx is done. lead's context
// ends when the Lease is lost or ctx is done; the Lease is given up (so a
// standby takes over at once, not after LeaseDuration) only once lead has
// returned: two watchers never overlap in one process, nor across a clean
// hand-over. leading, if not nil, is told of every change. An error from
// lead ends runElected with it.
func runElected(ctx context.Context, e Election, lock resourcelock.Interface, leading func(bool), lead func(context.Context) error) error {
	for ctx.Err() == nil {
		if err := term(ctx, e, lock, leading, lead); err != nil {
			return err
		}
	}
	return nil
}

// term stands for election once: it returns when ctx is done before this
// replica was elected, or when its time as leader is over (the Lease lost,
// lead returned, ctx done) and lead has returned.
func term(ctx context.Context, e Election, lock resourcelock.Interface, leading func(bool), lead func(context.Context) error) error {
	logger := logging.FromContext(ctx).With(zap.String("lease", e.Namespace+"/"+e.Lease), zap.String("identity", e.Identity))
	// The election outlives ctx by as long as lead takes to return: the
	// Lease is released (ReleaseOnCancel) when electCtx ends.
	electCtx, endElection := context.WithCancel(context.WithoutCancel(ctx))
	defer endElection()
	var (
		mu       sync.Mutex
		started  bool
		leadDone = make(chan struct{})
		leadErr  error
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		s := started
		mu.Unlock()
		if s {
			<-leadDone // lead sees ctx itself
		}
		endElection()
	})
	defer stop()
	el, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            e.Lease,
		LeaseDuration:   e.LeaseDuration,
		RenewDeadline:   e.RenewDeadline,
		RetryPeriod:     e.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				started = true
				mu.Unlock()
				defer close(leadDone)
				lctx, cancel := context.WithCancel(lctx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				logger.Info("Leading: this replica watches")
				if leading != nil {
					leading(true)
				}
				leadErr = lead(lctx)
				if leading != nil {
					leading(false)
				}
				// The term ends with lead, whatever ended it: give the Lease up.
				endElection()
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				if id != e.Identity {
					logger.Infow("Standing by: another replica watches", zap.String("leader", id))
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	el.Run(electCtx)
	// Run returns as soon as the Lease is lost, maybe before lead has.
	mu.Lock()
	s := started
	mu.Unlock()
	if !s {
		return nil
	}
	<-leadDone
	if leadErr == nil && ctx.Err() == nil {
		logger.Warn("Lost the lease: stopped watching; standing again")
	}
	return leadErr
}
