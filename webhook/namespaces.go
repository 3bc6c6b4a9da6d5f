package webhook

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// cachedNamespaces reads the informer cache and falls back to one API read on
// a miss: a namespace created a moment before its first pod may not be in
// the cache yet, and guessing "unlabelled" would silently skip that pod.
type cachedNamespaces struct {
	lister corelisters.NamespaceLister
	client kubernetes.Interface
}

func (c cachedNamespaces) Labels(ctx context.Context, name string) (map[string]string, error) {
	ns, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		ns, err = c.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		// Pod-level labels and annotations can still opt the pod in.
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading namespace %q: %w", name, err)
	}
	return ns.Labels, nil
}
