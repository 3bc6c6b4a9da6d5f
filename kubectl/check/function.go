package check

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// KnativeServices is the resource of Knative Serving's Services.
var KnativeServices = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}

// function checks what quits proxies: the proxy-quit Knative Service's Ready
// condition, or the all-in-one Deployment in standalone.
func (r *run) function() Item {
	if r.shape == ShapeStandalone {
		state, up := available(r.watcher)
		if !up {
			return fail(ItemFunction, fmt.Sprintf("Deployment %s, which runs the function in-process, is not available (%s)", names.AllInOneDeployment, state),
				r.kubectl("describe deployment "+names.AllInOneDeployment))
		}
		return ok(ItemFunction, fmt.Sprintf("in-process in Deployment %s (%s)", names.AllInOneDeployment, state))
	}
	show := r.kubectl("get ksvc " + names.FunctionService)
	var ksvc *unstructured.Unstructured
	var err error = apierrors.NewNotFound(KnativeServices.GroupResource(), names.FunctionService)
	if r.Dynamic != nil {
		ksvc, err = r.Dynamic.Resource(KnativeServices).Namespace(r.SystemNamespace).Get(r.ctx, names.FunctionService, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		return r.functionDeployment(show)
	case err != nil:
		return fail(ItemFunction, fmt.Sprintf("reading Knative Service %s/%s: %v", r.SystemNamespace, names.FunctionService, err), show)
	}
	r.ksvc = ksvc
	conditions, _, _ := unstructured.NestedSlice(ksvc.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if m["type"] != "Ready" {
			continue
		}
		if m["status"] == "True" {
			rev, _, _ := unstructured.NestedString(ksvc.Object, "status", "latestReadyRevisionName")
			return ok(ItemFunction, fmt.Sprintf("Knative Service %s Ready (revision %s)", names.FunctionService, rev))
		}
		return fail(ItemFunction, fmt.Sprintf("Knative Service %s not Ready: %v: %v", names.FunctionService, m["reason"], m["message"]), show)
	}
	return fail(ItemFunction, fmt.Sprintf("Knative Service %s has no Ready condition yet", names.FunctionService), show)
}

// functionDeployment judges an install without the Knative Service: a
// Deployment of the same name stands in for it where Knative Serving is
// not installed (the kwok harness, make run).
func (r *run) functionDeployment(show string) Item {
	d, err := r.deployment(names.FunctionService)
	switch {
	case err != nil:
		return fail(ItemFunction, err.Error(), show)
	case d == nil:
		return fail(ItemFunction, fmt.Sprintf("Knative Service %s/%s not found (is Knative Serving installed?): nothing quits proxies",
			r.SystemNamespace, names.FunctionService), show)
	}
	state, up := available(d)
	if !up {
		return fail(ItemFunction, fmt.Sprintf("no Knative Service, and Deployment %s is not available (%s)", names.FunctionService, state),
			r.kubectl("describe deployment "+names.FunctionService))
	}
	return ok(ItemFunction, fmt.Sprintf("Deployment %s (%s; no Knative Service)", names.FunctionService, state))
}
