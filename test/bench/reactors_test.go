//go:build e2e

package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/bench/quitter"
)

// The two comparison points of the reaction benchmark: the floor
// (quitter.Floor) and serial. Both exec through the same client-go
// executor as istio-aux's function, so only the path to the exec differs.
var floor = quitter.Floor

// serial is the reference implementation's approach: a full-pod informer,
// a rate-limited queue and one worker that reconciles pods one at a time
// and execs synchronously when only istio-proxy still runs.
func serial(ctx context.Context, cs kubernetes.Interface, ex proxyquit.Execer, ns string) (stop func(), errs *atomic.Int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	errs = &atomic.Int64{}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]())
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			q.Add(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
	}); err != nil {
		cancel()
		return nil, nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		cancel()
		return nil, nil, ctx.Err()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			key, shutdown := q.Get()
			if shutdown {
				return
			}
			pod, err := inf.Lister().Pods(key.Namespace).Get(key.Name)
			if err == nil && quitter.Waiting(pod) {
				ectx, ecancel := context.WithTimeout(ctx, 10*time.Second)
				if _, err := ex.Exec(ectx, key.Namespace, key.Name, keys.ProxyContainer, quitter.QuitArgv); err != nil && ctx.Err() == nil {
					errs.Add(1)
					q.AddRateLimited(key)
				} else {
					q.Forget(key)
				}
				ecancel()
			}
			q.Done(key)
		}
	}()
	return func() { cancel(); q.ShutDown(); <-done; f.Shutdown() }, errs, nil
}

// seen records, per pod, when a watch first saw its app terminated with
// the proxy still running: where every reaction clock starts.
func seen(ctx context.Context, cs kubernetes.Interface, ns string) (stop func(), at func() map[types.UID]time.Time, err error) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	times := map[types.UID]time.Time{}
	w, err := quitter.PodWatch(ctx, cs, ns, "")
	if err != nil {
		cancel()
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			now := time.Now()
			if pod, ok := ev.Object.(*corev1.Pod); ok && quitter.Waiting(pod) {
				mu.Lock()
				if _, has := times[pod.UID]; !has {
					times[pod.UID] = now
				}
				mu.Unlock()
			}
		}
	}()
	return func() { cancel(); <-done }, func() map[types.UID]time.Time {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[types.UID]time.Time, len(times))
		for k, v := range times {
			out[k] = v
		}
		return out
	}, nil
}
