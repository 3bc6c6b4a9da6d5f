// Package quitter is the benchmarks' floor quitter, the least any
// watch-and-exec approach does to end a pod's proxy, for test/bench and
// cmd/floorquit.
package quitter

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
)

// QuitArgv is what every implementation execs in istio-proxy.
var QuitArgv = []string{"pilot-agent", "request", "POST", "quitquitquit"}

// Floor is the least any watcher can do: a bare pod watch that, the first
// time it sees "app terminated, proxy running", starts the exec at once in
// its own goroutine (retrying a failed or timed-out one). No cache, no
// queue, no decision, no re-read. stop ends it once its execs are done;
// errs counts the failed execs it retried.
func Floor(ctx context.Context, cs kubernetes.Interface, ex proxyquit.Execer, ns string) (stop func(), errs *atomic.Int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	errs = &atomic.Int64{}
	w, err := PodWatch(ctx, cs, ns, "")
	if err != nil {
		cancel()
		return nil, nil, err
	}
	var fired sync.Map
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer w.Stop()
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || !Waiting(pod) {
				continue
			}
			if _, dup := fired.LoadOrStore(pod.UID, true); dup {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Like every implementation, it gives an exec a deadline
				// and tries again until one succeeds.
				for ctx.Err() == nil {
					ectx, ecancel := context.WithTimeout(ctx, 10*time.Second)
					_, err := ex.Exec(ectx, pod.Namespace, pod.Name, keys.ProxyContainer, QuitArgv)
					ecancel()
					if err == nil {
						return
					}
					if ctx.Err() == nil {
						errs.Add(1)
					}
					select { // spacing retries, as any controller would
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			}()
		}
	}()
	return func() { cancel(); wg.Wait() }, errs, nil
}

// Waiting is "every app terminated, a classic proxy running": the moment a
// reaction clock starts.
func Waiting(p *corev1.Pod) bool {
	status := cluster.ContainerStatus
	if status(p, keys.ProxyContainer).State.Running == nil {
		return false
	}
	for _, c := range p.Spec.Containers {
		if c.Name != keys.ProxyContainer && status(p, c.Name).State.Terminated == nil {
			return false
		}
	}
	return len(p.Spec.Containers) > 1
}

// PodWatch watches the pods of ns ("": every namespace) that match the
// label selector ("": all) from now on, resuming from the last event it
// delivered whenever the API server ends the watch: the API server closes
// watchers that fall behind, which a 200-pod burst on 2 cores makes happen,
// and a bare watch would then silently stop seeing pods.
func PodWatch(ctx context.Context, cs kubernetes.Interface, ns, selector string) (watch.Interface, error) {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, err
	}
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.LabelSelector = selector
		return cs.CoreV1().Pods(ns).Watch(ctx, o)
	}}
	return watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, lw)
}
