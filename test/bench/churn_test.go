//go:build e2e

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// podRef names one pod.
type podRef struct{ ns, name string }

// refs names pods prefix-00000 .. prefix-(n-1) in ns, as createPods names them.
func refs(ns, prefix string, n int) []podRef {
	out := make([]podRef, n)
	for i := range out {
		out[i] = podRef{ns, fmt.Sprintf("%s-%05d", prefix, i)}
	}
	return out
}

// churn changes the status of pods, one at a time in turn, perSecond times
// a second in total (its Ready condition flips, as a probe's would), until
// the returned stop is called; stop returns how many changes were written.
func churn(ctx context.Context, cs kubernetes.Interface, pods []podRef, perSecond int) (stop func() int64) {
	ctx, cancel := context.WithCancel(ctx)
	var done atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p := pods[i%len(pods)]
			ready := "False"
			if (i/len(pods))%2 == 1 {
				ready = "True"
			}
			patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
				"type": "Ready", "status": ready, "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}}}})
			// Not ctx: a change sent when stop is called is finished, so
			// that the count says exactly what was written.
			pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := cs.CoreV1().Pods(p.ns).Patch(pctx, p.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
			pcancel()
			if err == nil {
				done.Add(1)
			}
		}
	})
	return func() int64 { cancel(); wg.Wait(); return done.Load() }
}

// labelNamespaces sets (value not empty) or removes label key on every
// namespace in names, with 16 clients.
func labelNamespaces(ctx context.Context, cs kubernetes.Interface, names []string, key, value string) error {
	var v any
	if value != "" {
		v = value
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: v}}})
	return parallel(len(names), 16, func(i int) error {
		return retry.OnError(retry.DefaultBackoff, func(error) bool { return ctx.Err() == nil }, func() error {
			_, err := cs.CoreV1().Namespaces().Patch(ctx, names[i], types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		})
	})
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// threadsCPU is the CPU time process pid's threads have used, to the
// nanosecond (/proc/<pid>/task/*/schedstat; /proc/<pid>/stat counts 10 ms
// ticks, too coarse for a nearly idle bridge). Threads that exited are not
// counted; Go's runtime keeps its threads.
func threadsCPU(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, task := range tasks {
		b, err := os.ReadFile(dir + "/" + task.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, task.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// cpuOf is threadsCPU's, or the test fails: every CPU time make bench
// reads (ours, the floors', the API server's, the node's).
func cpuOf(t *testing.T, pid int) time.Duration {
	t.Helper()
	d, err := threadsCPU(pid)
	if err != nil {
		t.Fatalf("CPU of pid %d: %v", pid, err)
	}
	return d
}

// apiserverMetric sums metric name (with labels) of the API server's own
// /metrics.
func apiserverMetric(ctx context.Context, cs kubernetes.Interface, name string, labels ...string) (float64, error) {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	return cluster.SumSamples(body, name, labels...)
}
