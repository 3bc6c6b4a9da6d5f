//go:build e2e

package node

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// One real node serves every test of the package (each in a namespace of
// its own): a whole cluster, istiod as the injector and the images its pods
// run; istio-aux is installed on first use (meshCluster), as users install
// it, after Knative Serving.
var shared = &mesh.Shared{
	Options: mesh.Options{Knative: true},
	LogName: "istio-aux-node.log", Verbose: "NODE_VERBOSE",
	Explain: logIstioAux,
}

// nodeCluster returns the shared cluster, without istio-aux unless another
// test installed it.
func nodeCluster(t *testing.T) *cluster.Cluster { return shared.Mesh(t).Cluster }

// meshCluster is nodeCluster with istio-aux installed from config/ (`ko
// apply -f config/`: the webhook, the bridge, NATS and the function).
func meshCluster(t *testing.T) (*cluster.Cluster, *istioaux.Installed) {
	t.Helper()
	return installedAs(t, istioaux.Config)
}

// installedAs is nodeCluster with istio-aux installed from dir (Config or
// Standalone). Tests that ask for another folder than config/ must not be
// parallel.
func installedAs(t *testing.T, dir string) (*cluster.Cluster, *istioaux.Installed) {
	t.Helper()
	m, aux := shared.Installed(t, dir)
	return m.Cluster, aux
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

// appContainer runs the test app with APP_* settings (test/cmd/app).
func appContainer(env map[string]string) corev1.Container {
	ctr := corev1.Container{Name: "app", Image: images.AppRef}
	for k, v := range env {
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: k, Value: v})
	}
	return ctr
}

func terminated(p *corev1.Pod, name string) *corev1.ContainerStateTerminated {
	return cluster.ContainerStatus(p, name).State.Terminated
}

func running(p *corev1.Pod, name string) bool {
	return cluster.ContainerStatus(p, name).State.Running != nil
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
	cmd := exec.CommandContext(ctx, cluster.Kubectl(), append([]string{"--kubeconfig=" + c.Kubeconfig()}, args...)...)
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
