package proxyquit

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Cluster is what the function asks the API server: the live objects it
// decides on. Errors are the API server's (apierrors.IsNotFound works on
// them). internal/kube's Client is one, reading straight from the API
// server: the function is stateless and scales to zero, and a quit must
// never act on a stale pod. A Cluster that is also a Reviewer reviews the
// callers' tokens (New).
type Cluster interface {
	// Pod reads a pod at least as new as the resourceVersion notOlderThan,
	// which lets the API server answer from its watch cache instead of a
	// quorum read of etcd; empty asks for the most recent (etcd).
	Pod(ctx context.Context, namespace, name, notOlderThan string) (*corev1.Pod, error)
	Namespace(ctx context.Context, name string) (*corev1.Namespace, error)
	// Node reads a node: the function asks only for the kubelet's version
	// of a pod whose decision it can change (decision.KubeletMatters).
	Node(ctx context.Context, name string) (*corev1.Node, error)
	// DeletePod deletes a pod if it is still the one read: its uid and
	// resourceVersion (a Conflict otherwise). The function deletes only a
	// pod Istio CNI's start race left unable to start (decision.Replace).
	DeletePod(ctx context.Context, namespace, name string, uid types.UID, resourceVersion string) error
}

// NamespaceTTL is how long NamespaceCache reuses a namespace it read.
const NamespaceTTL = 5 * time.Second

// NamespaceCache is a Cluster that reads pods live, always, but reuses a
// namespace read within the last NamespaceTTL, and makes concurrent reads of
// one namespace share a single GET. When a hundred Jobs finish at once in
// one namespace, the function then spends one namespace read on them
// instead of a hundred, which under the client's rate limit was a third of
// every quit's wait. The namespace only says whether the pod is opted in;
// the pod, whose state decides whether quitting is safe, is never cached.
// So a label removed from a namespace is seen at most NamespaceTTL late, and
// what that can cost is quitting the proxy of a pod whose apps are done.
type NamespaceCache struct {
	Cluster
	ttl     time.Duration
	now     func() time.Time
	flights singleflight.Group

	mu      sync.Mutex
	entries map[string]namespaceEntry
}

type namespaceEntry struct {
	ns   *corev1.Namespace
	read time.Time
}

// maxNamespaceEntries bounds the cache; expired entries go first.
const maxNamespaceEntries = 4096

// NewNamespaceCache wraps c.
func NewNamespaceCache(c Cluster) *NamespaceCache {
	return &NamespaceCache{Cluster: c, ttl: NamespaceTTL, now: time.Now, entries: map[string]namespaceEntry{}}
}

// Namespace implements Cluster. Errors are not cached. The result is shared
// between callers and must not be modified.
func (c *NamespaceCache) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	if ns, ok := c.lookup(name); ok {
		return ns, nil
	}
	v, err, _ := c.flights.Do(name, func() (any, error) {
		if ns, ok := c.lookup(name); ok {
			return ns, nil
		}
		read := c.now()
		ns, err := c.Cluster.Namespace(ctx, name)
		if err != nil {
			return nil, err
		}
		c.store(name, namespaceEntry{ns: ns, read: read})
		return ns, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*corev1.Namespace), nil
}

func (c *NamespaceCache) lookup(name string) (*corev1.Namespace, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[name]
	if !ok || c.now().Sub(e.read) >= c.ttl {
		return nil, false
	}
	return e.ns, true
}

func (c *NamespaceCache) store(name string, e namespaceEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxNamespaceEntries {
		now := c.now()
		for k, old := range c.entries {
			if now.Sub(old.read) >= c.ttl {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxNamespaceEntries {
			clear(c.entries)
		}
	}
	c.entries[name] = e
}
