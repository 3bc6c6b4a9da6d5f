package knative

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/poll"
)

// ServiceResource is Knative Serving's Service.
var ServiceResource = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}

// Status is what a Knative Service reports once Ready.
type Status struct {
	// URL is its address (cluster-local: http://<name>.<ns>.svc.cluster.local).
	URL string
	// Revision is the latest ready revision, which serves all traffic.
	Revision string
}

// Installed reports whether c serves Knative Serving's API.
func Installed(c *cluster.Cluster) bool {
	_, err := c.Client().Discovery().ServerResourcesForGroupVersion(ServiceResource.GroupVersion().String())
	return err == nil
}

// PodSelector selects the pods of every revision of the Knative Service name.
func PodSelector(name string) string { return "serving.knative.dev/service=" + name }

// WaitReady waits until the Knative Service ns/name is Ready at its current
// generation, its latest revision ready and serving, and returns its status.
func WaitReady(ctx context.Context, c *cluster.Cluster, ns, name string, timeout time.Duration) (Status, error) {
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return Status{}, err
	}
	var st Status
	var why string
	err = poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		ksvc, err := dyn.Resource(ServiceResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var ok bool
		st, ok, why = readyStatus(ksvc)
		return ok, nil
	})
	if err != nil {
		return st, fmt.Errorf("knative service %s/%s not Ready: %w (%s)", ns, name, err, why)
	}
	return st, nil
}

// readyStatus reads a Knative Service's status: Ready, with the reason when
// it is not.
func readyStatus(ksvc *unstructured.Unstructured) (Status, bool, string) {
	var s struct {
		ObservedGeneration        int64  `json:"observedGeneration"`
		URL                       string `json:"url"`
		LatestReadyRevisionName   string `json:"latestReadyRevisionName"`
		LatestCreatedRevisionName string `json:"latestCreatedRevisionName"`
		Conditions                []struct {
			Type, Status, Reason, Message string
		} `json:"conditions"`
	}
	raw, _, _ := unstructured.NestedMap(ksvc.Object, "status")
	b, _ := json.Marshal(raw)
	if err := json.Unmarshal(b, &s); err != nil {
		return Status{}, false, err.Error()
	}
	st := Status{URL: s.URL, Revision: s.LatestReadyRevisionName}
	if s.ObservedGeneration != ksvc.GetGeneration() {
		return st, false, fmt.Sprintf("observed generation %d of %d", s.ObservedGeneration, ksvc.GetGeneration())
	}
	if s.LatestReadyRevisionName == "" || s.LatestReadyRevisionName != s.LatestCreatedRevisionName {
		return st, false, fmt.Sprintf("latest ready revision %q, latest created %q", s.LatestReadyRevisionName, s.LatestCreatedRevisionName)
	}
	for _, cond := range s.Conditions {
		if cond.Type == "Ready" {
			return st, cond.Status == "True", fmt.Sprintf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
		}
	}
	return st, false, "no Ready condition"
}

// MinScale sets the Knative Service ns/name's autoscaling.knative.dev/
// min-scale (config/ ships "2"; docs/install.md tells whoever prefers scale
// to zero to set "0") and waits until its new revision is Ready.
func MinScale(ctx context.Context, c *cluster.Cluster, ns, name string, n int, timeout time.Duration) (Status, error) {
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return Status{}, err
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"autoscaling.knative.dev/min-scale":"%d"}}}}}`, n)
	if _, err := dyn.Resource(ServiceResource).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return Status{}, fmt.Errorf("knative service %s/%s: min-scale %d: %w", ns, name, n, err)
	}
	return WaitReady(ctx, c, ns, name, timeout)
}
