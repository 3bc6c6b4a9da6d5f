package install

import (
	"context"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// Endpoints counts a Service's endpoints across its EndpointSlices.
type Endpoints struct {
	Ready, Total int
}

// EndpointsOf counts the endpoints of slices. An endpoint whose ready
// condition is unset counts as ready, as the API documents it; one that
// is terminating (a pod being replaced, deleted, evicted) is on its way
// out and counts not at all, or every rollout would read as a replica
// missing until the old pod is gone.
func EndpointsOf(slices []discoveryv1.EndpointSlice) Endpoints {
	var e Endpoints
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Terminating != nil && *ep.Conditions.Terminating {
				continue
			}
			e.Total++
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				e.Ready++
			}
		}
	}
	return e
}

// WebhookEndpoints counts the endpoints of the webhook's Service in ns:
// where the API server sends admission reviews.
func WebhookEndpoints(ctx context.Context, cs kubernetes.Interface, ns string) (Endpoints, error) {
	l, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + names.WebhookService})
	if err != nil {
		return Endpoints{}, fmt.Errorf("listing the EndpointSlices of Service %s/%s: %w", ns, names.WebhookService, err)
	}
	return EndpointsOf(l.Items), nil
}
