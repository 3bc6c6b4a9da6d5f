package watch

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/internal/kube"
)

// PodFieldSelector lets the API server drop pods istio-aux never acts on:
// long-running pods and pods that already finished. (Pods support both
// fields as selectors: k8s.io/kubernetes pkg/registry/core/pod/strategy.go,
// PodToSelectableFields.) The filter still checks both, so a server or fake
// that ignores the selector changes nothing but the cache size.
const PodFieldSelector = "spec.restartPolicy!=Always,status.phase!=Succeeded,status.phase!=Failed"

// SlimNamespace is the namespace informer's transform: name and labels are
// all opt-in reads.
func SlimNamespace(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Namespace:
		return slimNamespace(o), nil
	case cache.DeletedFinalStateUnknown:
		if n, ok := o.Obj.(*corev1.Namespace); ok {
			o.Obj = slimNamespace(n)
		}
		return o, nil
	}
	return obj, nil
}

func slimNamespace(n *corev1.Namespace) *corev1.Namespace {
	labels := make(map[string]string, len(n.Labels))
	for k, v := range n.Labels {
		labels[k] = v
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: labels}}
}

// KubeLists are the lists the bridge runs on: internal/kube's (protobuf,
// core/v1 only), pods namespace by namespace with PodFieldSelector.
func KubeLists(c *kube.Client) Lists {
	return Lists{
		Namespaces: c.NamespaceListWatch(),
		Pods: func(namespace, labelSelector string) cache.ListerWatcher {
			return c.PodListWatch(namespace, PodFieldSelector, labelSelector)
		},
	}
}
