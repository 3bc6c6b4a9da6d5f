// Package kube is the Kubernetes client of the bridge and the proxy-quit
// function: the core/v1 API and the one authentication call the function
// makes, nothing else. client-go's clientset (and its scheme) registers the
// types of every API group when the binary starts; a process that only
// reads pods and namespaces, execs and writes Events would pay for that on
// every start and in its RSS (make bench measures the bridge's; deps_test.go
// keeps the clientset out). Requests are protobuf, falling back to JSON.
package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Scheme knows core/v1 (and the meta/v1 options it embeds) only.
var Scheme = runtime.NewScheme()

// ParameterCodec encodes request options (list, watch, exec) as query
// parameters.
var ParameterCodec = runtime.NewParameterCodec(Scheme)

func init() {
	utilruntime.Must(corev1.AddToScheme(Scheme))
}

// Client is a REST client for /api/v1.
type Client struct {
	rest rest.Interface
}

// NewForConfig returns a core/v1 client for the cluster rc points at, with
// rc's rate limits. Unless rc names a content type, requests and responses
// are protobuf.
func NewForConfig(rc *rest.Config) (*Client, error) {
	c := rest.CopyConfig(rc)
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(Scheme).WithoutConversion()
	if c.ContentType == "" {
		c.ContentType = runtime.ContentTypeProtobuf
		c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	r, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &Client{rest: r}, nil
}

// RESTClient is the underlying client (building exec URLs).
func (c *Client) RESTClient() rest.Interface { return c.rest }

// Pod reads a pod at least as new as resourceVersion notOlderThan (empty:
// the most recent, a quorum read).
func (c *Client) Pod(ctx context.Context, namespace, name, notOlderThan string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := c.rest.Get().Namespace(namespace).Resource("pods").Name(name).
		VersionedParams(&metav1.GetOptions{ResourceVersion: notOlderThan}, ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// DeletePod deletes a pod if it is still the one read: the same uid at
// the same resourceVersion (a Conflict otherwise).
func (c *Client) DeletePod(ctx context.Context, namespace, name string, uid types.UID, resourceVersion string) error {
	return c.rest.Delete().Namespace(namespace).Resource("pods").Name(name).
		Body(&metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &resourceVersion}}).
		Do(ctx).Error()
}

// Namespace reads a namespace.
func (c *Client) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	out := &corev1.Namespace{}
	err := c.rest.Get().Resource("namespaces").Name(name).
		VersionedParams(&metav1.GetOptions{}, ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// Node reads a node.
func (c *Client) Node(ctx context.Context, name string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := c.rest.Get().Resource("nodes").Name(name).
		VersionedParams(&metav1.GetOptions{}, ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// ConfigMap reads a ConfigMap.
func (c *Client) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	err := c.rest.Get().Namespace(namespace).Resource("configmaps").Name(name).
		VersionedParams(&metav1.GetOptions{}, ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// ConfigMapListWatch lists and watches one ConfigMap (a field selector on
// its name, which RBAC can grant by resourceNames).
func (c *Client) ConfigMapListWatch(namespace, name string) *cache.ListWatch {
	return c.listWatch(namespace, "configmaps", "metadata.name="+name, "", func() runtime.Object { return &corev1.ConfigMapList{} })
}

// FollowConfigMap calls apply with ConfigMap namespace/name when it is
// added or changes, and with nil when it is deleted, until ctx is done. It
// returns whether its first list is in. How the components follow
// config-logging and config-istio-aux.
func (c *Client) FollowConfigMap(ctx context.Context, namespace, name string, apply func(*corev1.ConfigMap)) cache.InformerSynced {
	inf := cache.NewSharedIndexInformer(c.ConfigMapListWatch(namespace, name), &corev1.ConfigMap{}, 0, cache.Indexers{})
	// Registration only fails on a stopped informer; this one is new.
	reg, _ := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { apply(obj.(*corev1.ConfigMap)) },
		UpdateFunc: func(_, obj any) { apply(obj.(*corev1.ConfigMap)) },
		DeleteFunc: func(any) { apply(nil) },
	})
	go inf.RunWithContext(ctx)
	return reg.HasSynced
}

// PodListWatch lists and watches the pods of one namespace that match
// fieldSelector and labelSelector (empty: no selection). The bridge
// watches pods namespace by namespace, never across the cluster.
func (c *Client) PodListWatch(namespace, fieldSelector, labelSelector string) *cache.ListWatch {
	return c.listWatch(namespace, "pods", fieldSelector, labelSelector, func() runtime.Object { return &corev1.PodList{} })
}

// NamespaceListWatch lists and watches namespaces.
func (c *Client) NamespaceListWatch() *cache.ListWatch {
	return c.listWatch("", "namespaces", "", "", func() runtime.Object { return &corev1.NamespaceList{} })
}

// listWatch lists and watches resource in namespace ("": all, or a
// cluster-scoped resource) with the given selectors.
func (c *Client) listWatch(namespace, resource, fieldSelector, labelSelector string, list func() runtime.Object) *cache.ListWatch {
	tweak := func(o *metav1.ListOptions) {
		if fieldSelector != "" {
			o.FieldSelector = fieldSelector
		}
		if labelSelector != "" {
			o.LabelSelector = labelSelector
		}
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			out := list()
			err := c.rest.Get().Namespace(namespace).Resource(resource).VersionedParams(&o, ParameterCodec).Do(ctx).Into(out)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			o.Watch = true
			return c.rest.Get().Namespace(namespace).Resource(resource).VersionedParams(&o, ParameterCodec).Watch(ctx)
		},
	}
}

// EventSink writes Kubernetes Events (core/v1) for a record.EventBroadcaster.
func (c *Client) EventSink() record.EventSink { return eventSink{c.rest} }

// Recorder records Events from component through c until ctx is done.
func (c *Client) Recorder(ctx context.Context, component string) record.EventRecorder {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(c.EventSink())
	context.AfterFunc(ctx, b.Shutdown)
	return b.NewRecorder(Scheme, corev1.EventSource{Component: component})
}

type eventSink struct{ rest rest.Interface }

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.rest.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(context.Background()).Into(out)
	return out, err
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.rest.Put().Namespace(e.Namespace).Resource("events").Name(e.Name).Body(e).Do(context.Background()).Into(out)
	return out, err
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.rest.Patch(types.StrategicMergePatchType).Namespace(e.Namespace).Resource("events").Name(e.Name).
		Body(data).Do(context.Background()).Into(out)
	return out, err
}
