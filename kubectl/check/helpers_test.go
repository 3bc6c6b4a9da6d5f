package check_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	certresources "knative.dev/pkg/webhook/certificates/resources"

	"github.com/istio-aux/istio-aux/kubectl/check"
	"github.com/istio-aux/istio-aux/test/modroot"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

const sys = "istio-aux"

// cluster is an install for Checker to read: typed objects for the
// clientset, the Knative Service for the dynamic client, and the metrics
// each pod serves through the pod proxy.
type cluster struct {
	objects []runtime.Object
	ksvc    *unstructured.Unstructured
	metrics map[string]string
	// server is the API server's version ("": v1.33.13).
	server string
}

// node is a Node whose kubelet reports version.
func node(name, version string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: version}}}
}

// healthy is config/ installed and working, with its exec policies read
// from config/204 and 205 themselves; the certificate expires in days.
func healthy(t *testing.T, now time.Time) *cluster {
	t.Helper()
	secret, mwc := certificate(t, now.Add(7*24*time.Hour))
	objects := []runtime.Object{secret, mwc, webhookSlice(discoveryv1.Endpoint{}, discoveryv1.Endpoint{}),
		deployment("istio-aux-webhook", 2, 2),
		deployment("istio-aux-bridge", 2, 2),
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "istio-aux-nats"},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(3))}, Status: appsv1.StatefulSetStatus{ReadyReplicas: 3}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "config-istio-aux"},
			Data: map[string]string{"nats-url": "nats://istio-aux-nats.istio-aux.svc.cluster.local:4222"}},
		lease("istio-aux-bridge-a", now.Add(-3*time.Second)),
		pod("istio-aux-bridge-a", "bridge", true), pod("istio-aux-bridge-b", "bridge", true),
		namespace("jobs", map[string]string{"istio-aux.dev/enabled": "true"}),
		namespace("legacy", map[string]string{"io.datastrophic/istio-aux": "enabled"}),
		namespace("some", map[string]string{"istio-aux.dev/enabled": "pods"}),
		namespace("plain", nil),
		node("node-0", "v1.33.13"), node("node-1", "v1.32.13"), node("node-2", "v1.32.13"),
		functionPod("proxy-quit-00001-deployment-a", "node-0"), functionPod("proxy-quit-00001-deployment-b", "node-1"),
		knativeConfig("config-features", map[string]string{"kubernetes.podspec-topologyspreadconstraints": "enabled"}),
	}
	objects = append(objects, manifests(t, "config/204-proxyquit-exec-policy.yaml", "config/205-proxyquit-exec-policy-binding.yaml")...)
	return &cluster{objects: objects, ksvc: ksvc("True", ""), metrics: map[string]string{
		"istio-aux-bridge-a": "# TYPE istio_aux_dispatch_backlog gauge\nistio_aux_dispatch_backlog 4\n",
		"istio-aux-bridge-b": "# TYPE istio_aux_dispatch_backlog gauge\nistio_aux_dispatch_backlog 4\n",
	}}
}

// certificate is the webhook's Secret with a certificate valid until
// notAfter (as knative's certificates controller makes it), and the
// configuration with its CA.
func certificate(t *testing.T, notAfter time.Time) (*corev1.Secret, *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	key, cert, ca, err := certresources.CreateCerts(context.Background(), "istio-aux-webhook", sys, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "istio-aux-webhook-certs"},
			Data: map[string][]byte{certresources.ServerKey: key, certresources.ServerCert: cert, certresources.CACert: ca}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-webhook"},
			Webhooks: admission.Webhooks(sys, admissionregistrationv1.WebhookClientConfig{CABundle: ca})}
}

// expiring gives c a certificate valid until notAfter.
func (c *cluster) expiring(t *testing.T, notAfter time.Time) {
	secret, mwc := certificate(t, notAfter)
	c.replace(secret)
	c.replace(mwc)
}

// ignoring sets failurePolicy Ignore on the named webhooks of c's
// configuration, every one when none is named.
func (c *cluster) ignoring(names ...string) {
	for _, o := range c.objects {
		if mwc, ok := o.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
			for i := range mwc.Webhooks {
				if len(names) == 0 || slices.Contains(names, mwc.Webhooks[i].Name) {
					mwc.Webhooks[i].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
				}
			}
		}
	}
}

// standalone is config/standalone/ installed and working.
func standalone(t *testing.T, now time.Time) *cluster {
	c := healthy(t, now)
	c.without("Deployment", "istio-aux-bridge")
	c.without("StatefulSet", "istio-aux-nats")
	c.without("Pod", "istio-aux-bridge-a")
	c.without("Pod", "istio-aux-bridge-b")
	c.without("Lease", "istio-aux-watcher")
	c.objects = append(c.objects, deployment("istio-aux-allinone", 1, 1), pod("istio-aux-allinone-a", "allinone", true),
		lease("istio-aux-allinone-a", now.Add(-time.Second)))
	c.ksvc = nil
	c.metrics = map[string]string{"istio-aux-allinone-a": "istio_aux_dispatch_backlog 0\n"}
	return c
}

// without removes the object of that kind and name.
func (c *cluster) without(kind, name string) {
	var kept []runtime.Object
	for _, o := range c.objects {
		m, err := metaOf(o)
		if err != nil || kindOf(o) != kind || m.GetName() != name {
			kept = append(kept, o)
		}
	}
	c.objects = kept
}

// replace swaps in an object of the same kind and name.
func (c *cluster) replace(o runtime.Object) {
	m, _ := metaOf(o)
	c.without(kindOf(o), m.GetName())
	c.objects = append(c.objects, o)
}

func metaOf(o runtime.Object) (metav1.Object, error) { return meta.Accessor(o) }

func kindOf(o runtime.Object) string {
	kinds, _, err := scheme.Scheme.ObjectKinds(o)
	if err != nil || len(kinds) == 0 {
		return ""
	}
	return kinds[0].Kind
}

// checker is a Checker on the fakes of c.
func (c *cluster) checker(now time.Time) check.Checker {
	cs := fake.NewClientset(c.objects...)
	server := c.server
	if server == "" {
		server = "v1.33.13"
	}
	cs.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: server}
	cs.PrependProxyReactor("pods", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		p := a.(k8stesting.ProxyGetAction)
		text, ok := c.metrics[p.GetName()]
		if !ok || p.GetPort() != "9090" || p.GetPath() != "metrics" {
			return true, response{err: io.ErrUnexpectedEOF}, nil
		}
		return true, response{body: text}, nil
	})
	var dynObjects []runtime.Object
	if c.ksvc != nil {
		dynObjects = append(dynObjects, c.ksvc)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{check.KnativeServices: "ServiceList"}, dynObjects...)
	return check.Checker{Client: cs, Dynamic: dyn, SystemNamespace: sys, Now: func() time.Time { return now }}
}

// response is what the pod proxy answers.
type response struct {
	body string
	err  error
}

func (r response) DoRaw(context.Context) ([]byte, error) { return []byte(r.body), r.err }
func (r response) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewBufferString(r.body)), r.err
}

func deployment(name string, want, ready int32) *appsv1.Deployment {
	status := corev1.ConditionFalse
	if ready > 0 {
		status = corev1.ConditionTrue
	}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(want)},
		Status: appsv1.DeploymentStatus{ReadyReplicas: ready, AvailableReplicas: ready,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: status}}}}
}

func pod(name, component string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: name, Labels: map[string]string{"app.kubernetes.io/component": component}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
}

func lease(holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "istio-aux-watcher"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(15)),
			RenewTime: &metav1.MicroTime{Time: renewed}}}
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// ksvc is the proxy-quit Knative Service with its Ready condition, as
// config/ ships it (min-scale 2) and docs/install.md spreads it.
func ksvc(ready, reason string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "serving.knative.dev/v1", "kind": "Service",
		"metadata": map[string]any{"namespace": sys, "name": "proxy-quit"},
		"spec": map[string]any{"template": map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{"autoscaling.knative.dev/min-scale": "2"}},
			"spec": map[string]any{"topologySpreadConstraints": []any{map[string]any{
				"maxSkew": int64(1), "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}}},
		}},
		"status": map[string]any{"latestReadyRevisionName": "proxy-quit-00001",
			"conditions": []any{map[string]any{"type": "Ready", "status": ready, "reason": reason, "message": "revision failed"}}},
	}}
}

// atKnativeDefaults is c's Knative Service without min-scale or spread.
func (c *cluster) atKnativeDefaults() {
	unstructured.RemoveNestedField(c.ksvc.Object, "spec", "template")
}

// functionPod is a ready pod of the function's revision on node.
func functionPod(name, node string) *corev1.Pod {
	p := pod(name, "proxyquit", true)
	p.Labels["serving.knative.dev/service"] = "proxy-quit"
	p.Spec.NodeName = node
	return p
}

// knativeConfig is a ConfigMap of Knative Serving.
func knativeConfig(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "knative-serving", Name: name}, Data: data}
}

// manifests decodes the objects of config files, as kubectl applies them.
func manifests(t *testing.T, files ...string) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(modroot.Dir(), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(raw, []byte("\n---")) {
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, obj)
		}
	}
	return out
}

func statefulSet(want, ready int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "istio-aux-nats"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(want)}, Status: appsv1.StatefulSetStatus{ReadyReplicas: ready}}
}

// webhookSlice is the webhook Service's EndpointSlice with endpoints.
func webhookSlice(endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "istio-aux-webhook-x",
		Labels: map[string]string{discoveryv1.LabelServiceName: "istio-aux-webhook"}}, Endpoints: endpoints}
}
