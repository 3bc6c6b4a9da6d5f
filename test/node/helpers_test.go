//go:build e2e

package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/realnode"
)

// One real node serves every test of the package (each in a namespace of
// its own): starting one takes seconds. It runs the whole mesh
// (test/mesh): a whole cluster, istiod as the injector and the images its
// pods run; istio-aux is installed on first use (meshCluster), as users
// install it.
var shared struct {
	once     sync.Once
	m        *mesh.Mesh
	err      error
	log      io.Writer
	closeLog func()
	// aux is istio-aux as installed now: from config/ unless a test (not
	// parallel) switched to another folder.
	auxMu sync.Mutex
	aux   *istioaux.Installed
}

// nodeCluster returns the shared cluster, starting it on first use. It
// skips the test where the machine cannot host a node (fails it with
// CI=true).
func nodeCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	realnode.RequireNode(t)
	shared.once.Do(func() {
		shared.log, shared.closeLog = cluster.ProcessLog("istio-aux-node.log", "NODE_VERBOSE")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		start := time.Now()
		shared.m, shared.err = mesh.Start(ctx, mesh.Options{Node: true, Log: shared.log})
		fmt.Fprintf(os.Stderr, "real node, images and istiod up in %s\n", time.Since(start).Round(time.Millisecond))
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.m.Cluster
}

// meshCluster is nodeCluster with istio-aux installed from config/ (`ko
// apply -f config/`: the webhook, the bridge, NATS and the function).
func meshCluster(t *testing.T) (*cluster.Cluster, *istioaux.Installed) {
	t.Helper()
	return installedAs(t, istioaux.Config)
}

// installedAs is nodeCluster with istio-aux installed from dir (Config or
// Standalone), moved there from another install as a user would move.
// Tests that ask for another folder than config/ must not be parallel.
func installedAs(t *testing.T, dir string) (*cluster.Cluster, *istioaux.Installed) {
	t.Helper()
	c := nodeCluster(t)
	shared.auxMu.Lock()
	defer shared.auxMu.Unlock()
	if shared.aux != nil && shared.aux.Dir() == dir {
		return c, shared.aux
	}
	// A cold build of the images (ko, -trimpath) takes minutes on 2 cores;
	// make e2e warms the build cache first (hack/ko-resolve.sh).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var aux *istioaux.Installed
	var err error
	if shared.aux != nil {
		aux, err = shared.aux.Move(ctx, dir)
	} else if err = installKnative(ctx, c); err == nil {
		aux, err = istioaux.Install(ctx, c, dir, shared.log)
	}
	if err != nil {
		logIstioAux(t, c)
		t.Fatalf("installing istio-aux from %s: %v", dir, err)
	}
	shared.aux = aux
	t.Cleanup(func() {
		if t.Failed() {
			logIstioAux(t, c)
		}
	})
	return c, aux
}

// logIstioAux logs the last lines of every istio-aux container's log: what
// explains a quit that did not come.
func logIstioAux(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	pods, err := c.Client().CoreV1().Pods(istioaux.SystemNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("istio-aux's pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		for _, ctr := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			out, _ := kubectl(t, c, "logs", "-n", istioaux.SystemNamespace, p.Name, "-c", ctr.Name, "--tail=40")
			t.Logf("logs of %s/%s:\n%s", p.Name, ctr.Name, out)
		}
	}
}

func stopShared() {
	if shared.m != nil {
		if err := shared.m.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the real node's mesh:", err)
		}
	}
	if shared.closeLog != nil {
		shared.closeLog()
	}
}

// namespace creates a namespace for the test, named after it, without
// Istio's injection.
func namespace(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	return mesh.Namespace(t, c.Client(), mesh.NameFor(t, ""), false, nil)
}

// appContainer runs the test app with APP_* settings (test/cmd/app).
func appContainer(env map[string]string) corev1.Container {
	ctr := corev1.Container{Name: "app", Image: images.AppRef}
	for k, v := range env {
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: k, Value: v})
	}
	return ctr
}

// proxyContainer is the stand-in istio-proxy (test/cmd/istio-proxy-ish),
// ready after readyAfter.
func proxyContainer(readyAfter string) corev1.Container {
	return corev1.Container{
		Name: "istio-proxy", Image: images.ProxyIshRef,
		Env: []corev1.EnvVar{{Name: "PROXY_READY_AFTER", Value: readyAfter}},
	}
}

// newPod is a pod for the real node, with a short grace period.
func newPod(ns, name string, policy corev1.RestartPolicy, containers ...corev1.Container) *corev1.Pod {
	grace := int64(5)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 policy,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    containers,
		},
	}
}

func create(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	if _, err := c.Client().CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPod polls the pod until cond holds, failing the test after timeout.
func waitPod(t *testing.T, c *cluster.Cluster, ns, name string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	check, last := podCheck(c, ns, name, cond)
	if err := cluster.Poll(context.Background(), 50*time.Millisecond, timeout, check); err != nil {
		t.Fatalf("pod %s/%s: %v%s", ns, name, err, lastStatus(*last))
	}
	return *last
}

// stays checks that cond holds at every poll for the whole duration: the
// pod must not move on by itself (a check, not a wait for something).
func stays(t *testing.T, c *cluster.Cluster, ns, name string, d time.Duration, what string, cond func(*corev1.Pod) bool) {
	t.Helper()
	check, last := podCheck(c, ns, name, cond)
	if err := cluster.Consistently(context.Background(), 100*time.Millisecond, d, check); err != nil {
		t.Fatalf("pod %s/%s: %s: %v%s", ns, name, what, err, lastStatus(*last))
	}
}

// podCheck is a poll condition: cond on the live pod, which it keeps in
// *last for the failure message.
func podCheck(c *cluster.Cluster, ns, name string, cond func(*corev1.Pod) bool) (func(context.Context) (bool, error), **corev1.Pod) {
	last := new(*corev1.Pod)
	return func(ctx context.Context) (bool, error) {
		p, err := c.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		*last = p
		return cond(p), nil
	}, last
}

func lastStatus(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("; last status: phase %s, init %s, containers %s",
		p.Status.Phase, describe(p.Status.InitContainerStatuses), describe(p.Status.ContainerStatuses))
}

var status = cluster.ContainerStatus

func terminated(p *corev1.Pod, name string) *corev1.ContainerStateTerminated {
	return status(p, name).State.Terminated
}

func running(p *corev1.Pod, name string) bool { return status(p, name).State.Running != nil }

func describe(ss []corev1.ContainerStatus) string {
	var parts []string
	for _, s := range ss {
		state := "waiting"
		switch {
		case s.State.Running != nil:
			state = "running"
		case s.State.Terminated != nil:
			state = fmt.Sprintf("terminated(%d,%s)", s.State.Terminated.ExitCode, s.State.Terminated.Reason)
		case s.State.Waiting != nil:
			state = "waiting(" + s.State.Waiting.Reason + ")"
		}
		parts = append(parts, fmt.Sprintf("%s=%s restarts=%d ready=%t", s.Name, state, s.RestartCount, s.Ready))
	}
	return strings.Join(parts, ", ")
}

// kubectl runs the cluster's kubectl; it returns the combined output and
// the exit code (errors other than a non-zero exit fail the test).
func kubectl(t *testing.T, c *cluster.Cluster, args ...string) (string, int) {
	t.Helper()
	return kubectlEnv(t, c, nil, args...)
}

// kubectlEnv is kubectl with variables added to its environment (t.Setenv
// is not for parallel tests).
func kubectlEnv(t *testing.T, c *cluster.Cluster, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir(), "kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig()}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), 0
}
