package proxyquit

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Cluster reads the live objects the function decides on. Errors are the
// API server's (apierrors.IsNotFound works on them).
type Cluster interface {
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	Namespace(ctx context.Context, name string) (*corev1.Namespace, error)
}

// ClientCluster is a Cluster over a clientset, reading straight from the API
// server: the function is stateless and scales to zero, so a cache would be
// cold on most calls anyway, and a quit must never act on a stale pod.
type ClientCluster struct {
	Client kubernetes.Interface
}

// Pod implements Cluster.
func (c ClientCluster) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Namespace implements Cluster.
func (c ClientCluster) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	return c.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
}
