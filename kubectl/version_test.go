package kubectl_test

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/kubectl"
)

func workload(kind, name, image string, ready int32) runtime.Object {
	meta := metav1.ObjectMeta{Namespace: "istio-aux", Name: name, Labels: map[string]string{"app.kubernetes.io/name": "istio-aux"}}
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Image: "not/listed:x"}},
		Containers:     []corev1.Container{{Name: strings.TrimPrefix(name, "istio-aux-"), Image: image}}}}
	if kind == "StatefulSet" {
		return &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), Template: tmpl},
			Status: appsv1.StatefulSetStatus{ReadyReplicas: ready}}
	}
	return &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Template: tmpl},
		Status: appsv1.DeploymentStatus{ReadyReplicas: ready}}
}

// TestVersion: the plugin's build, and each installed container's image
// with its tag and digest read apart (a registry's port is no tag), in
// text and JSON; other namespaces' and unlabelled workloads are not
// istio-aux's.
func TestVersion(t *testing.T) {
	objects := []runtime.Object{
		workload("Deployment", "istio-aux-webhook", "registry.example.com:5000/istio-aux/webhook:v0.3.1@sha256:aaaa", 2),
		workload("Deployment", "istio-aux-bridge", "registry.example.com:5000/istio-aux/bridge@sha256:bbbb", 1),
		workload("StatefulSet", "istio-aux-nats", "registry.example.com/istio-aux/nats-server:v0.3.1", 3),
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-aux", Name: "unlabelled"}},
	}
	kc := "--kubeconfig=" + kubeconfig(t, "default")
	out, errOut, code := run(t, objects, "version", kc)
	if code != kubectl.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"plugin: ", "Deployment/istio-aux-webhook  webhook", "v0.3.1", "2/2",
		"Deployment/istio-aux-bridge", "1/2", "StatefulSet/istio-aux-nats", "3/3"} {
		if !strings.Contains(out, want) {
			t.Errorf("version's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "unlabelled") || strings.Contains(out, "not/listed") {
		t.Errorf("version lists what is not istio-aux's containers:\n%s", out)
	}

	out, _, code = run(t, objects, "version", kc, "-o", "json")
	var v kubectl.Versions
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != kubectl.ExitOK {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	byWorkload := map[string]kubectl.Component{}
	for _, c := range v.Components {
		byWorkload[c.Workload] = c
	}
	if w := byWorkload["Deployment/istio-aux-webhook"]; w.Version != "v0.3.1" || w.Digest != "sha256:aaaa" {
		t.Errorf("webhook: %+v", w)
	}
	if b := byWorkload["Deployment/istio-aux-bridge"]; b.Version != "" || b.Digest != "sha256:bbbb" {
		t.Errorf("bridge (no tag, a port): %+v", b)
	}
	if n := byWorkload["StatefulSet/istio-aux-nats"]; n.Version != "v0.3.1" || n.Digest != "" || n.Ready != "3/3" {
		t.Errorf("nats: %+v", n)
	}
	if v.Plugin.GoVersion == "" || v.Plugin.Version == "" {
		t.Errorf("plugin: %+v", v.Plugin)
	}
}

// TestVersionClient: --client reads no cluster; without it, a cluster that
// cannot be reached is said, the plugin's version still printed, exit 1.
func TestVersionClient(t *testing.T) {
	unreachable := func(clientcmd.ClientConfig) (kubectl.Clients, error) {
		return kubectl.Clients{}, errUnreachable
	}
	var out, errOut strings.Builder
	if code := kubectl.Main(t.Context(), []string{"version", "--client"}, &out, &errOut, unreachable); code != kubectl.ExitOK ||
		!strings.HasPrefix(out.String(), "plugin: ") || strings.Contains(out.String(), "installed") {
		t.Errorf("--client: exit %d, %q %q", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := kubectl.Main(t.Context(), []string{"version"}, &out, &errOut, unreachable); code != kubectl.ExitProblem ||
		!strings.Contains(out.String(), "plugin: ") || !strings.Contains(out.String(), "installed: unknown: no cluster here") {
		t.Errorf("unreachable: exit %d, %q", code, out.String())
	}
}

type unreachableError struct{}

func (unreachableError) Error() string { return "no cluster here" }

var errUnreachable = unreachableError{}
