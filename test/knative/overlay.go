package knative

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The one overlay the harness puts on Knative Serving's config/core, and
// why; everything else is applied as the release ships it.

// IngressClass is Traefik's KIngress class (its Knative provider reconciles
// only KIngresses of this class).
const IngressClass = "traefik.ingress.networking.knative.dev"

// Autoscaler is what the harness sets in config-autoscaler: Knative's
// defaults (a 60 s stable window, a 30 s grace before the last pod goes)
// would make every scale-to-zero test wait minutes. 6 s is the shortest
// window Knative accepts. What scales up and how fast is as shipped.
var Autoscaler = map[string]string{
	"stable-window":              "6s",
	"scale-to-zero-grace-period": "6s",
}

// systemCPU is the CPU request of each of Serving's Deployments here: the
// release asks 600m for the four (the activator 300m), sized for a
// production cluster; one shared 2-core node also has to fit the tests'
// pods. Limits stay as shipped.
const systemCPU = "25m"

// testOverlay changes docs (config/core resolved, plus config-network) in
// place: Traefik as the ingress class, the Autoscaler knobs, systemCPU.
func testOverlay(docs []*unstructured.Unstructured) error {
	set := map[string]map[string]string{
		"config-network":    {"ingress-class": IngressClass},
		"config-autoscaler": Autoscaler,
	}
	for name, data := range set {
		cm := find(docs, "ConfigMap", name)
		if cm == nil {
			return fmt.Errorf("knative serving's manifests have no ConfigMap %s", name)
		}
		for k, v := range data {
			if err := unstructured.SetNestedField(cm.Object, v, "data", k); err != nil {
				return err
			}
		}
	}
	for _, name := range []string{"activator", "autoscaler", "controller", "webhook"} {
		d := find(docs, "Deployment", name)
		if d == nil {
			return fmt.Errorf("knative serving's manifests have no Deployment %s", name)
		}
		containers, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		if err != nil || len(containers) == 0 {
			return fmt.Errorf("deployment %s: no containers (%w)", name, err)
		}
		for i := range containers {
			ctr := containers[i].(map[string]any)
			if err := unstructured.SetNestedField(ctr, systemCPU, "resources", "requests", "cpu"); err != nil {
				return err
			}
		}
		if err := unstructured.SetNestedSlice(d.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			return err
		}
	}
	return nil
}
