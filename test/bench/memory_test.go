//go:build e2e

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// memory grows an opted-in namespace of Running pods through p.memLevels
// and, at each level, starts afresh the real bridge in both shapes (the
// deployed one carries the targets) and the full-pod informer, waits until
// each has listed every pod, and reads their settled VmRSS side by side.
func memory(t *testing.T, c *cluster.Cluster, a *istioaux.IstioAux, cs kubernetes.Interface, p params, res *results, log io.Writer) {
	ctx := context.Background()
	const ns = "bench-memory"
	if err := parkedNamespace(ctx, cs, ns, mesh.OptedIn); err != nil {
		t.Fatal(err)
	}
	full := istioaux.MustBuild(t, "./test/bench/cmd/fullinformer", "fullinformer")
	created := 0
	var deployed, allInOne, informer []int64
	bridgeRSS := func(shape istioaux.Shape, level int) int64 {
		if err := a.StopBridge(); err != nil {
			t.Fatal(err)
		}
		if err := a.StartBridgeAs(shape); err != nil {
			t.Fatal(err)
		}
		_, bpid := a.Pids()
		rss, err := settledRSS(ctx, bpid)
		if err != nil {
			t.Fatalf("bridge RSS at %d pods: %v", level, err)
		}
		return rss
	}
	for _, level := range p.memLevels {
		if err := createPods(ctx, cs, refs(ns, "mem", level)[created:], true, nil); err != nil {
			t.Fatal(err)
		}
		created = level
		d, o := bridgeRSS(istioaux.Deployed, level), bridgeRSS(istioaux.AllInOne, level)
		f, err := fullInformerRSS(ctx, c, full, level, log)
		if err != nil {
			t.Fatalf("full informer RSS at %d pods: %v", level, err)
		}
		deployed, allInOne, informer = append(deployed, d), append(allInOne, o), append(informer, f)
		res.add("memory", fmt.Sprintf("RSS, %d Running pods: bridge / bridge all-in-one / full informer", level),
			mib(d)+" / "+mib(o)+" / "+mib(f), "", "")
	}
	natsPid, fnPid := a.PeerPids()
	for i, name := range []string{"nats-server", "proxy-quit function"} {
		if rss, err := settledRSS(ctx, []int{natsPid, fnPid}[i]); err == nil {
			res.add("memory", fmt.Sprintf("RSS of the deployed shape's %s at %d pods (holds no pods)", name, created), mib(rss), "", "")
		}
	}
	last := len(p.memLevels) - 1
	n := p.memLevels[last]
	if n == 0 {
		return
	}
	// The slope over the last step is the cost of one more pod once the
	// fixed costs of caching any pods at all are paid; from 0 it includes them.
	slope := func(rss []int64, from int) float64 {
		return float64(rss[last]-rss[from]) / float64(n-p.memLevels[from])
	}
	from := max(0, last-1)
	perPod, perPodOne, perPodFull := slope(deployed, from), slope(allInOne, from), slope(informer, from)
	res.add("memory", fmt.Sprintf("KiB per additional pod, %d→%d: bridge / all-in-one / full", p.memLevels[from], n),
		fmt.Sprintf("%.2f / %.2f / %.2f KiB (%.1fx less than full)", perPod, perPodOne, perPodFull, perPodFull/perPod), "≤ 2 KiB", verdict(perPod <= 2))
	res.add("memory", fmt.Sprintf("KiB per pod, 0→%d: bridge / all-in-one / full", n),
		fmt.Sprintf("%.2f / %.2f / %.2f KiB", slope(deployed, 0), slope(allInOne, 0), slope(informer, 0)), "", "")
	res.add("memory", fmt.Sprintf("bridge RSS at %d pods", n), mib(deployed[last]), "≤ 50 MB", verdict(deployed[last]*1024 <= 50e6))
}

// fullInformerRSS runs cmd/fullinformer until it has cached at least want
// pods, reads its settled RSS and stops it.
func fullInformerRSS(ctx context.Context, c *cluster.Cluster, bin string, want int, log io.Writer) (int64, error) {
	proc, err := startReady(ctx, c, log, "fullinformer", bin, nil, func(ready string) error {
		if n, err := strconv.Atoi(ready); err != nil || n < want {
			return fmt.Errorf("%q pods cached, want %d (%w)", ready, want, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = proc.Stop() }() // the figure is taken; how it ends does not matter
	return settledRSS(ctx, proc.Pid())
}

// startReady runs one of the bench's commands (bin) with KUBECONFIG and
// READY_FILE set and env, and waits until what it wrote to its ready file
// passes ready; the process is stopped if it does not.
func startReady(ctx context.Context, c *cluster.Cluster, log io.Writer, name, bin string, env []string,
	ready func(string) error) (*cluster.Process, error) {
	file := filepath.Join(c.Dir(), name+".ready")
	_ = os.Remove(file)
	proc, err := cluster.StartProcess(name, log, append([]string{"KUBECONFIG=" + c.Kubeconfig(), "READY_FILE=" + file}, env...), bin)
	if err != nil {
		return nil, err
	}
	if err := proc.WaitUp(ctx, 2*time.Minute, func(context.Context) error {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		return ready(string(b))
	}); err != nil {
		_ = proc.Stop()
		return nil, err
	}
	return proc, nil
}
