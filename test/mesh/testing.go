package mesh

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
)

// NameFor is a namespace name for the test t: its name lower-cased, with
// "/" and "_" as "-", then suffix, keeping the last 63 characters (a
// subtest's own part is at the end).
func NameFor(t testing.TB, suffix string) string {
	name := strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name())) + suffix
	if len(name) > 63 {
		name = strings.TrimLeft(name[len(name)-63:], "-")
	}
	return name
}

// Namespace creates namespace name for the test t, with Istio's injection
// on if injected, and labels; it fails t if it cannot.
func Namespace(t testing.TB, cs kubernetes.Interface, name string, injected bool, labels map[string]string) string {
	t.Helper()
	create := CreatePlainNamespace
	if injected {
		create = CreateNamespace
	}
	if err := create(context.Background(), cs, name, labels); err != nil {
		t.Fatal(err)
	}
	return name
}

// Stuck is what the pod of a Job istio-aux leaves alone looks like: its
// app container has terminated, istio-proxy still runs, so the pod stays
// Running and the Job never completes.
func Stuck(p *corev1.Pod, app string) bool {
	return p.Status.Phase == corev1.PodRunning &&
		cluster.ContainerStatus(p, app).State.Terminated != nil &&
		cluster.ContainerStatus(p, keys.ProxyContainer).State.Running != nil
}

// ProxyFirstWithHold reports whether Istio injected istio-proxy as the
// first container with the postStart `pilot-agent wait`: what the hold
// asks for.
func ProxyFirstWithHold(p *corev1.Pod) bool {
	if len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Name != keys.ProxyContainer {
		return false
	}
	h := p.Spec.Containers[0].Lifecycle
	return h != nil && h.PostStart != nil && h.PostStart.Exec != nil &&
		strings.Join(h.PostStart.Exec.Command, " ") == "pilot-agent wait"
}
