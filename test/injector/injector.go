// Package injector is a small stand-in for Istio's sidecar injector, served
// by the test process and registered as MutatingWebhookConfiguration
// "istio-sidecar-injector", so that the API server orders it after
// istio-aux's webhook exactly as in a real mesh.
//
// It adds istio-proxy the way Istio's templates do in the parts istio-aux
// depends on: with holdApplicationUntilProxyStarts (from the pod's
// proxy.istio.io/config) the proxy goes first with a postStart
// `pilot-agent wait`; with sidecar.istio.io/nativeSidecar: "true" it is an
// init container with restartPolicy Always; sidecar.istio.io/inject: "false"
// skips the pod. Istio's own templates are not used: istio.io/istio is a
// very large module whose Kubernetes versions do not match ours, and its
// templates need a mesh config and values this harness would have to fake.
package injector

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Names Istio uses, as the injector reads and writes them.
const (
	ConfigurationName    = "istio-sidecar-injector"
	AnnotationProxy      = "proxy.istio.io/config"
	AnnotationInject     = "sidecar.istio.io/inject"
	AnnotationNative     = "sidecar.istio.io/nativeSidecar"
	AnnotationStatus     = "sidecar.istio.io/status"
	NamespaceLabel       = "istio-injection"
	ProxyImage           = "docker.io/istio/proxyv2:1.27.0"
	proxyContainer       = "istio-proxy"
	holdApplicationField = "holdApplicationUntilProxyStarts"
)

// Inject returns the pod as Istio would inject it, and whether it changed.
// It is pure: the input is not modified.
func Inject(in *corev1.Pod) (*corev1.Pod, bool) {
	if in.Annotations[AnnotationInject] == "false" || hasProxy(in) {
		return in, false
	}
	pod := in.DeepCopy()
	proxy := corev1.Container{
		Name:  proxyContainer,
		Image: ProxyImage,
		Args:  []string{"proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local"},
		Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/healthz/ready", Port: intOrString(15021),
		}}},
	}
	switch {
	case pod.Annotations[AnnotationNative] == "true":
		proxy.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		pod.Spec.InitContainers = append([]corev1.Container{proxy}, pod.Spec.InitContainers...)
	case holdApplication(pod.Annotations[AnnotationProxy]):
		proxy.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
			Command: []string{"pilot-agent", "wait"},
		}}}
		pod.Spec.Containers = append([]corev1.Container{proxy}, pod.Spec.Containers...)
	default:
		pod.Spec.Containers = append(pod.Spec.Containers, proxy)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	status, _ := json.Marshal(map[string]any{"containers": []string{proxyContainer}, "revision": "default"})
	pod.Annotations[AnnotationStatus] = string(status)
	return pod, true
}

func hasProxy(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			if c.Name == proxyContainer {
				return true
			}
		}
	}
	return false
}

// holdApplication reads holdApplicationUntilProxyStarts from a ProxyConfig
// YAML; anything unparsable counts as unset, as in Istio.
func holdApplication(config string) bool {
	if config == "" {
		return false
	}
	var pc map[string]any
	if err := yaml.Unmarshal([]byte(config), &pc); err != nil {
		return false
	}
	switch v := pc[holdApplicationField].(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// String renders the proxy's position for logs: "hold", "native" or "last".
func String(pod *corev1.Pod) string {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == proxyContainer {
			return "native"
		}
	}
	if len(pod.Spec.Containers) > 0 && pod.Spec.Containers[0].Name == proxyContainer {
		return "hold"
	}
	return fmt.Sprintf("last of %d", len(pod.Spec.Containers))
}
