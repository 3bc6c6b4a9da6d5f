package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/internal/kube"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/test/poll"
	"github.com/istio-aux/istio-aux/test/record"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// apiServerSource plays a Knative ApiServerSource (Resource mode, pods): a
// dynamic informer, as its adapter uses, turning every add, update and
// delete into the CloudEvent the adapter would send, kept per namespace in
// arrival order.
type apiServerSource struct {
	source string
	mu     sync.Mutex
	events map[string][]cloudevents.Event // by namespace
	errs   []error
}

// watchPods runs the informer until ctx is done; it returns once synced.
func watchPods(ctx context.Context, rc *rest.Config) (*apiServerSource, error) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	s := &apiServerSource{source: rc.Host, events: map[string][]cloudevents.Event{}}
	f := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := f.ForResource(podsGVR).Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.add(podevent.TypeAPIServerAdd, obj) },
		UpdateFunc: func(_, obj any) { s.add(podevent.TypeAPIServerUpdate, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			s.add(podevent.TypeAPIServerDelete, obj)
		},
	})
	if err != nil {
		return nil, err
	}
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("pod informer did not sync")
	}
	return s, nil
}

func (s *apiServerSource) add(eventType string, obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	e, err := record.APIServerSourceEvent(s.source, eventType, u)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs = append(s.errs, err)
		return
	}
	s.events[u.GetNamespace()] = append(s.events[u.GetNamespace()], e)
}

// inNamespace returns the events seen so far for a namespace.
func (s *apiServerSource) inNamespace(ns string) ([]cloudevents.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) > 0 {
		return nil, fmt.Errorf("encoding ApiServerSource events: %w", s.errs[0])
	}
	return append([]cloudevents.Event(nil), s.events[ns]...), nil
}

// recordBridgeEvents runs the bridge's own watcher and change filter
// in-process, with every state change of opted-in pods published (not only
// Quit states, as the bridge binary does) to a Recorder instead of
// JetStream: what it writes to dir is what the bridge would publish for
// each state. The real bridge, started by istioaux.Start, is what quits the
// proxies meanwhile. It returns once the watcher's caches are synced.
func recordBridgeEvents(ctx context.Context, rc *rest.Config, dir string) error {
	rec, err := record.NewRecorder(dir)
	if err != nil {
		return err
	}
	client, err := kube.NewForConfig(rc)
	if err != nil {
		return err
	}
	md, err := metadata.NewForConfig(rc)
	if err != nil {
		return err
	}
	w := watch.New(watch.KubeLists(client, md), rec, metrics.NewBridge(nil), watch.Options{Source: rc.Host, PublishWaits: true, Workers: 1})
	go func() { _ = w.Run(ctx) }()
	return poll.Until(ctx, time.Minute, func(context.Context) (bool, error) { return w.Synced(), nil })
}
