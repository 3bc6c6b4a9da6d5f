package watch

import (
	"context"

	"go.uber.org/zap"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

func (w *Watcher) work(ctx context.Context) {
	for w.processNext(ctx) {
	}
}

func (w *Watcher) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if err := w.sync(ctx, key); err != nil {
		w.retry(ctx, key, err)
	}
	return true
}

// forget ends a pod's back-off: its state is published or needs no event.
func (w *Watcher) forget(key string) {
	w.queue.Forget(key)
	w.failing.Delete(key)
}

// RetryNow queues at once every pod waiting out a back-off after a failed
// publish: for when what failed (the NATS connection) is back. A pod
// synced twice is harmless: the second finds its state published.
func (w *Watcher) RetryNow() {
	w.failing.Range(func(k, _ any) bool {
		key := k.(string)
		w.queue.Forget(key)
		w.queue.Add(key)
		return true
	})
}

// retry re-queues a pod with back-off. Nothing is ever dropped: a pod that
// cannot be published is retried until it can, or until it no longer needs
// publishing.
func (w *Watcher) retry(ctx context.Context, key string, err error) {
	w.m.Retries.Inc()
	w.failing.Store(key, struct{}{})
	n := w.queue.NumRequeues(key)
	log := logging.FromContext(ctx).Desugar()
	if n < 3 {
		log.Info("Retrying pod event", zap.String("pod", key), zap.Int("requeues", n), zap.Error(err))
	} else {
		log.Warn("Pod event still not published", zap.String("pod", key), zap.Int("requeues", n), zap.Error(err))
	}
	w.queue.AddRateLimited(key)
}

// sync reads one pod, evaluates it and publishes its event if the filter
// says so.
func (w *Watcher) sync(ctx context.Context, key string) error {
	in, exists := w.read(key)
	if !exists {
		w.published.forget(key)
		w.forget(key)
		return nil
	}
	v := Evaluate(w.options(), w.o.PublishWaits, in)
	w.m.Filtered.WithLabelValues(v.Reason).Inc()
	if !v.Publish {
		if !v.OptedIn {
			w.published.forget(key)
		}
		w.forget(key)
		return nil
	}
	return w.publish(ctx, key, in.Pod, v.Fingerprint)
}

// read is the pod's cached state, unpacked (the cache itself is never handed
// out, so it cannot be modified), with its namespace's labels and what was
// last published for it; false when the pod is gone, or not in its
// namespace's scope (Scope.Admits): a pod the watcher does not serve reads
// as gone, whatever its own labels say.
func (w *Watcher) read(key string) (Input, bool) {
	ns, _, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return Input{}, false
	}
	nsLabels, ok := w.namespaceLabels(ns)
	if !ok {
		return Input{}, false
	}
	packed, exists := w.labelled.get(key)
	if !exists {
		if store := w.strays.store(ns); store != nil {
			packed, exists = store.get(key)
		}
	}
	if !exists {
		return Input{}, false
	}
	in := Input{Pod: packed.Unpack(), NamespaceLabels: nsLabels, Fingerprint: packed.Fingerprint()}
	if !ScopeOf(nsLabels).Admits(in.Pod.Labels) {
		return Input{}, false
	}
	in.Last, in.HasLast = w.published.get(key)
	return in, true
}

// publish hands one pod state to the publisher. The fingerprint is
// remembered while the publish is in flight and forgotten if it fails, so
// the retry publishes it again; the JetStream dedup id is the state
// (slim.DedupID), so republishing is always harmless.
func (w *Watcher) publish(ctx context.Context, key string, pod *slim.Pod, fp uint64) error {
	e, err := podevent.New(w.o.Source, pod)
	if err != nil {
		// A pod that cannot be JSON-encoded will not encode on a retry.
		w.m.PublishErrors.WithLabelValues("encode").Inc()
		logging.FromContext(ctx).Errorw("Encoding pod event", zap.String("pod", key), zap.Error(err))
		return nil
	}
	w.published.set(key, fp)
	err = w.pub.Publish(ctx, &e, slim.DedupID(pod.UID, fp), func(err error) {
		if err != nil {
			w.published.forgetIf(key, fp)
			w.retry(ctx, key, err)
			return
		}
		w.forget(key)
	})
	if err != nil {
		w.published.forgetIf(key, fp)
	}
	return err
}
