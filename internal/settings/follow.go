package settings

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/internal/kube"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// Event reasons recorded on ConfigMap config-istio-aux, where `kubectl
// describe` shows them beside the values.
const (
	ReasonApplied  = "SettingsApplied"
	ReasonRejected = "SettingsRejected"
	ReasonRestart  = "SettingsRestart"
	// ReasonIgnored is a warning: keys no component reads, or an edited
	// _example (Ignored). The keys that are known still apply.
	ReasonIgnored = "SettingsIgnored"
)

// Follower keeps a component's settings current with config-istio-aux.
type Follower struct {
	// Component names who reads (in logs and Events), and Instance which
	// replica (its pod's name; "" takes the host name, which is the pod's).
	Component, Instance string
	// Base is what the environment says (FromEnv); the ConfigMap's keys
	// override it.
	Base Settings
	// Apply receives every change once accepted, from one goroutine.
	Apply func(Settings)
	// Restart, if set, is called once when nats-url changes while the
	// process runs (a connection setting: the process starts again to
	// apply it, and its NATS_URL, a configMapKeyRef, is read anew).
	Restart func(url string)
	// Recorder records the Events; nil records none.
	Recorder record.EventRecorder

	mu      sync.Mutex
	cur     Settings
	read    bool     // the ConfigMap has been observed once
	seenURL *string  // nats-url as first seen (nil: not yet)
	ignored []string // the warnings last given (Ignored)
	logger  *zap.SugaredLogger
}

// Current is the settings in force.
func (f *Follower) Current() Settings {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

// Start follows ConfigMap config-istio-aux in namespace ns through client
// until ctx is done, and returns whether its first list is in. Base is in
// force until then, and whenever the ConfigMap does not exist.
func (f *Follower) Start(ctx context.Context, client *kube.Client, ns string) cache.InformerSynced {
	f.mu.Lock()
	f.cur = f.Base
	f.logger = logging.FromContext(ctx).With(zap.String("configmap", ns+"/"+names.ConfigMap))
	if f.Instance == "" {
		f.Instance, _ = os.Hostname()
	}
	f.mu.Unlock()
	return client.FollowConfigMap(ctx, ns, names.ConfigMap, f.Observe)
}

// FollowWait bounds how long Follow waits for the ConfigMap's first read:
// a missing RBAC grant must not keep a component from starting; its
// settings then apply when read.
const FollowWait = 5 * time.Second

// Follow is Start, then a wait of at most FollowWait for the first read,
// after which the component starts with Base (the environment's settings)
// and says so; the ConfigMap applies whenever it is read.
func (f *Follower) Follow(ctx context.Context, client *kube.Client, ns string) {
	synced := f.Start(ctx, client, ns)
	wctx, cancel := context.WithTimeout(ctx, FollowWait)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), synced) && ctx.Err() == nil {
		logging.FromContext(ctx).Warnw("ConfigMap "+names.ConfigMap+" not read yet; starting with the environment's settings until it is",
			zap.String("component", f.Component), zap.String("namespace", ns))
	}
}

// Observe applies one state of the ConfigMap (nil: deleted, the base
// applies). Exported for tests; Start calls it.
func (f *Follower) Observe(cm *corev1.ConfigMap) {
	f.mu.Lock()
	if f.logger == nil {
		f.logger = zap.NewNop().Sugar()
	}
	var data map[string]string
	if cm != nil {
		data = cm.Data
	}
	next, errs := Apply(f.cur, f.Base, data)
	prev, first := f.cur, !f.read
	f.cur, f.read = next, true
	// Warnings are given when they change, not at every relist of an
	// unchanged ConfigMap; a replica starting gives them once.
	ignored := Ignored(cm)
	warn := !slices.Equal(ignored, f.ignored)
	f.ignored = ignored
	restart := ""
	if _, ok := data[KeyNATSURL]; ok && f.Restart != nil {
		switch {
		case f.seenURL == nil:
			f.seenURL = &next.NATSURL
		case *f.seenURL != next.NATSURL:
			restart = next.NATSURL
		}
	}
	logger := f.logger
	f.mu.Unlock()

	for _, err := range errs {
		logger.Errorw("Setting refused; the previous value stays in force", zap.String("component", f.Component), zap.Error(err))
		if cm != nil && f.Recorder != nil {
			f.Recorder.Eventf(cm, corev1.EventTypeWarning, ReasonRejected, "%s keeps the previous value: %v", f.Component, err)
		}
	}
	if warn {
		for _, w := range ignored {
			logger.Warnw("Ignored in the ConfigMap; the known keys apply", zap.String("component", f.Component), zap.String("ignored", w))
			if f.Recorder != nil {
				f.Recorder.Eventf(cm, corev1.EventTypeWarning, ReasonIgnored, "%s: %s", f.Component, w)
			}
		}
	}
	if !equal(prev, next) {
		logger.Infow("Settings applied", zap.String("component", f.Component), zap.Stringer("settings", next))
		if f.Apply != nil {
			f.Apply(next)
		}
		// A change while it runs is said on the ConfigMap; what a
		// replica reads at start is not (a function scaled from zero
		// would say it at every start).
		if cm != nil && f.Recorder != nil && !first {
			f.Recorder.Eventf(cm, corev1.EventTypeNormal, ReasonApplied, "%s %s applies %s", f.Component, f.Instance, next)
		}
	}
	if restart != "" {
		logger.Infow("nats-url changed: starting again to connect to it", zap.String("component", f.Component), zap.String("natsURL", restart))
		if cm != nil && f.Recorder != nil {
			f.Recorder.Eventf(cm, corev1.EventTypeNormal, ReasonRestart, "%s starts again to connect to the new nats-url", f.Component)
		}
		f.Restart(restart)
	}
}

func equal(a, b Settings) bool {
	return slices.Equal(a.Decision.ExtraSidecars, b.Decision.ExtraSidecars) && a.Decision.QuitNative == b.Decision.QuitNative &&
		slices.Equal(a.QuitCommand, b.QuitCommand) && a.Resync == b.Resync && a.NATSURL == b.NATSURL
}

// ErrRestart is what a process stopping for Follower.Restart returns.
var ErrRestart = errors.New("nats-url changed: starting again to apply it")
