package watch

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"

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
// core/v1 only) for namespaces and pods, with PodFieldSelector; the
// metadata client's for the sweep, a page of 500 at a time (client-go's
// pager; the API server serves such lists from its watch cache).
func KubeLists(c *kube.Client, md metadata.Interface) Lists {
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	return Lists{
		Namespaces: c.NamespaceListWatch(),
		Pods: func(namespace, labelSelector string) cache.ListerWatcher {
			return c.PodListWatch(namespace, PodFieldSelector, labelSelector)
		},
		Strays: func(ctx context.Context, labelSelector string, each func(*metav1.PartialObjectMetadata)) error {
			p := pager.New(pager.SimplePageFunc(func(o metav1.ListOptions) (runtime.Object, error) {
				return md.Resource(pods).List(ctx, o)
			}))
			return p.EachListItem(ctx, metav1.ListOptions{FieldSelector: PodFieldSelector, LabelSelector: labelSelector},
				func(obj runtime.Object) error {
					if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
						each(m)
					}
					return nil
				})
		},
	}
}
