//go:build e2e

package node

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/knative"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// The Knative part of make bench (issue 22; hack/bench.sh runs it with
// NODE_BENCH_KNATIVE=1, method in docs/bench.md). Every figure is app exit →
// quit: the app's last log line ("app: exiting with") to the proxy's
// ("quitquitquit: exiting 0"), both stamped by containerd. Each result is
// printed as one "BENCH knative <key> <value>" line for the table.

func TestNodeBenchKnative(t *testing.T) {
	if os.Getenv("NODE_BENCH_KNATIVE") == "" {
		t.Skip("set NODE_BENCH_KNATIVE=1 (make bench BENCH_ONLY=knative) to measure Knative's scaling")
	}
	quick := os.Getenv("BENCH_QUICK") != ""
	rounds, burstJobs := 20, 48
	if quick {
		rounds, burstJobs = 5, 24
	}
	c, _ := meshCluster(t)
	// Every figure here starts from zero pods: scale to zero, as
	// docs/install.md offers it (config/ keeps two).
	if _, err := knative.MinScale(context.Background(), c, istioaux.SystemNamespace, "proxy-quit", 0, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Run("cold-start", func(t *testing.T) { benchColdStart(t, c, rounds) })
	t.Run("scale-down-under-load", func(t *testing.T) { benchPodGoneUnderLoad(t, c) })
	// Last: it moves the install to config/standalone/.
	t.Run("burst", func(t *testing.T) { benchBurst(t, c, burstJobs) })
}

func report(key, format string, args ...any) {
	fmt.Printf("BENCH knative %s %s\n", key, fmt.Sprintf(format, args...))
}

// quitLatency is a finished pod's app exit → quit.
func quitLatency(t *testing.T, c *cluster.Cluster, p *corev1.Pod) (exit time.Time, d time.Duration) {
	t.Helper()
	exit = logTime(t, c, p.Namespace, p.Name, "tensorflow", "app: exiting with")
	quit := logTime(t, c, p.Namespace, p.Name, keys.ProxyContainer, "quitquitquit: exiting 0")
	return exit, quit.Sub(exit)
}

// waitNoReadyFunction waits until the autoscaler has taken the function to
// zero replicas and no pod of it is ready (the last one may still drain).
func waitNoReadyFunction(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	const ns, name = istioaux.SystemNamespace, "proxy-quit"
	err := poll.Until(context.Background(), 3*time.Minute, func(ctx context.Context) (bool, error) {
		zero, err := knative.ScaledToZero(ctx, c, ns, name)
		if err != nil || !zero {
			return false, err
		}
		pods, err := c.Client().CoreV1().Pods(ns).List(ctx, listSelector(knative.PodSelector(name)))
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return cluster.PodReady(&p) }), nil
	})
	if err != nil {
		t.Fatalf("the function did not go to zero: %v", err)
	}
}

// readyBefore reports whether a function pod was ready before at.
func readyBefore(s knative.Scale, at time.Time) bool {
	for _, ready := range s.Pods {
		if !ready.IsZero() && ready.Before(at) {
			return true
		}
	}
	return false
}

// benchColdStart: rounds of two one-pod Jobs, the first ending while the
// function has no ready pod (a cold start through the activator), the
// second 4 s later, when the pod the first started serves it (warm).
func benchColdStart(t *testing.T, c *cluster.Cluster, rounds int) {
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	var cold, warm []time.Duration
	for i := range rounds {
		waitNoReadyFunction(t, c)
		watch := knative.WatchScale(context.Background(), c, istioaux.SystemNamespace, "proxy-quit")
		end := time.Now().Add(10 * time.Second)
		names := []string{fmt.Sprintf("cold-%d", i), fmt.Sprintf("warm-%d", i)}
		for j, name := range names {
			job := meshJob(name, 1, corev1.RestartPolicyNever, worker(map[string]string{
				"APP_RUN_UNTIL": end.Add(time.Duration(j) * 4 * time.Second).UTC().Format(time.RFC3339Nano)}))
			job.Spec.Template.Spec.ServiceAccountName = ""
			mesh.CreateJob(t, c, ns, job)
		}
		for _, name := range names {
			mesh.WaitJob(t, c, ns, name, batchv1.JobComplete, 3*time.Minute)
		}
		s := watch.Stop()
		p := mesh.OnlyPod(t, c, ns, names[0])
		exit, d := quitLatency(t, c, &p)
		if readyBefore(s, exit) {
			t.Fatalf("round %d: a function pod was ready before the cold Job's app exited: not a cold start", i)
		}
		cold = append(cold, d)
		p = mesh.OnlyPod(t, c, ns, names[1])
		exit, d = quitLatency(t, c, &p)
		if !readyBefore(s, exit) {
			t.Fatalf("round %d: no function pod was ready when the warm Job's app exited", i)
		}
		warm = append(warm, d)
		t.Logf("round %d: cold %s, warm %s", i, cold[i].Round(time.Millisecond), warm[i].Round(time.Millisecond))
	}
	report("cold", "p50=%s p99=%s n=%d", ms(knative.Percentile(cold, 0.5)), ms(knative.Percentile(cold, 0.99)), len(cold))
	report("warm", "p50=%s p99=%s n=%d", ms(knative.Percentile(warm, 0.5)), ms(knative.Percentile(warm, 0.99)), len(warm))
}

// benchPodGoneUnderLoad: while a burst's quits run, the first ready
// function pod is deleted as a scale-down deletes it (its queue-proxy drains what it holds;
// the activator sends the rest elsewhere). Nothing lost, nothing twice.
func benchPodGoneUnderLoad(t *testing.T, c *cluster.Cluster) {
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	ctx := context.Background()
	const n = 16
	end := time.Now().Add(45 * time.Second)
	deleted := make(chan string, 1)
	go func() {
		// From the burst's end, the first function pod ready (serving the
		// quits, or about to) is deleted.
		time.Sleep(time.Until(end)) // the schedule of the fault, not a synchronisation
		var victim string
		err := poll.Until(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			pods, err := c.Client().CoreV1().Pods(istioaux.SystemNamespace).List(ctx, listSelector(knative.PodSelector("proxy-quit")))
			if err != nil {
				return false, err
			}
			for _, p := range pods.Items {
				if cluster.PodReady(&p) {
					victim = p.Name
					return true, c.Client().CoreV1().Pods(istioaux.SystemNamespace).Delete(ctx, p.Name, deleteNow)
				}
			}
			return false, nil
		})
		deleted <- fmt.Sprintf("%s (%v)", victim, err)
	}()
	pods := burst(t, c, ns, n, end, 0)
	victim := <-deleted
	lost, twice := 0, 0
	for _, p := range pods {
		switch mesh.CountEvents(mesh.Events(t, c, p.Namespace, p.Name), "ProxyQuit") {
		case 0:
			lost++
		case 1:
		default:
			twice++
		}
	}
	t.Logf("deleted function pod %s while %d quits ran", victim, n)
	report("pod-gone", "jobs=%d lost=%d twice=%d deleted=%s", n, lost, twice, victim)
	if lost+twice > 0 {
		t.Errorf("%d quits lost, %d twice", lost, twice)
	}
}

// benchBurst: n Jobs ending together, first on config/ (the function from
// zero, scaled by Knative), then on config/standalone/ (the all-in-one,
// warm: it runs all the time), in the same run.
func benchBurst(t *testing.T, c *cluster.Cluster, n int) {
	waitNoReadyFunction(t, c)
	lead := time.Duration(n) * 3 * time.Second // time for n mesh pods to start here
	watch := knative.WatchScale(context.Background(), c, istioaux.SystemNamespace, "proxy-quit")
	var kn, ai burstResult
	t.Run("knative", func(t *testing.T) {
		kn = burstLatencies(t, c, burst(t, c, mesh.Namespace(t, c, "", true, mesh.OptedIn), n, time.Now().Add(lead), 0))
	})
	waitNoReadyFunction(t, c)
	s := watch.Stop()
	toZero := s.LastReady.Sub(kn.lastQuit)
	var firstReady []time.Duration
	for _, at := range s.Pods {
		if !at.IsZero() {
			firstReady = append(firstReady, at.Sub(kn.firstExit))
		}
	}
	slices.Sort(firstReady)

	installedAs(t, istioaux.Standalone)
	t.Run("allinone", func(t *testing.T) {
		ai = burstLatencies(t, c, burst(t, c, mesh.Namespace(t, c, "", true, mesh.OptedIn), n, time.Now().Add(lead), 0))
	})
	if t.Failed() {
		return
	}

	report("burst-pods", "jobs=%d spread=%s replicas=%d pods=%d max-ready=%d ready-after-first-exit=%v",
		n, ms(kn.spread), s.MaxReplicas, len(s.Pods), s.MaxReady, roundAll(firstReady))
	report("burst-knative", "p50=%s p99=%s", ms(knative.Percentile(kn.lat, 0.5)), ms(knative.Percentile(kn.lat, 0.99)))
	report("burst-allinone", "p50=%s p99=%s spread=%s", ms(knative.Percentile(ai.lat, 0.5)), ms(knative.Percentile(ai.lat, 0.99)), ms(ai.spread))
	report("burst-to-zero", "%s", ms(toZero))
}

type burstResult struct {
	lat       []time.Duration
	firstExit time.Time
	lastQuit  time.Time
	spread    time.Duration // first to last app exit
}

// burstLatencies reads every pod's app exit → quit; each pod was quit
// exactly once (burst waited for the Jobs; the Events say how often).
func burstLatencies(t *testing.T, c *cluster.Cluster, pods []corev1.Pod) burstResult {
	t.Helper()
	var r burstResult
	var last time.Time
	for _, p := range pods {
		exit, d := quitLatency(t, c, &p)
		mesh.OneEvent(t, c, p.Namespace, p.Name, "ProxyQuit")
		r.lat = append(r.lat, d)
		if q := exit.Add(d); q.After(r.lastQuit) {
			r.lastQuit = q
		}
		if r.firstExit.IsZero() || exit.Before(r.firstExit) {
			r.firstExit = exit
		}
		if exit.After(last) {
			last = exit
		}
	}
	r.spread = last.Sub(r.firstExit)
	return r
}

func listSelector(s string) metav1.ListOptions { return metav1.ListOptions{LabelSelector: s} }

// deleteNow deletes as `kubectl delete pod` does, with the pod's grace period.
var deleteNow = metav1.DeleteOptions{}

func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d.Microseconds())/1000) }

func roundAll(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}

// logTime is when the container logged its first line containing text,
// by the runtime's timestamp; the test fails if there is no such line.
func logTime(t *testing.T, c *cluster.Cluster, ns, pod, container, text string) time.Time {
	t.Helper()
	out, code := kubectl(t, c, "logs", "--timestamps", "-n", ns, pod, "-c", container)
	for line := range strings.Lines(out) {
		if ts, rest, ok := strings.Cut(line, " "); ok && code == 0 && strings.Contains(rest, text) {
			if at, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				return at
			}
		}
	}
	t.Fatalf("%s/%s %s logged no line with %q (kubectl exit %d): %s", ns, pod, container, text, code, out)
	return time.Time{}
}
