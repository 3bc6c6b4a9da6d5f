package cluster

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

var execGVR = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "execs"}

// startPodHelpers runs what a real cluster would have and ours lacks:
//   - a binder (there is no scheduler): every pod without a node goes to
//     kwok's fake node (with a Node, kube-scheduler places pods);
//   - a per-pod kwok Exec, so the program kwok runs for `kubectl exec`
//     (the stub pilot-agent) knows which pod it is in (POD_NAME,
//     POD_NAMESPACE), as it would inside a real container.
func (c *Cluster) startPodHelpers(ctx context.Context) error {
	dyn, err := dynamic.NewForConfig(c.rest)
	if err != nil {
		return err
	}
	pods := informers.NewSharedInformerFactory(c.client, 0).Core().V1().Pods().Informer()
	log := logFor(c.opts.Log)
	_, err = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			pod := obj.(*corev1.Pod)
			if err := c.ensureExec(ctx, dyn, pod); err != nil {
				fmt.Fprintf(log, "harness| exec for %s/%s: %v\n", pod.Namespace, pod.Name, err)
			}
			if err := c.bind(ctx, pod); err != nil {
				fmt.Fprintf(log, "harness| binding %s/%s: %v\n", pod.Namespace, pod.Name, err)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				err := dyn.Resource(execGVR).Namespace(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
					fmt.Fprintf(log, "harness| deleting exec %s/%s: %v\n", pod.Namespace, pod.Name, err)
				}
			}
		},
	})
	if err != nil {
		return err
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		pods.Run(ctx.Done())
	}()
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		return fmt.Errorf("pod informer did not sync")
	}
	return nil
}

// bind plays the scheduler for a pod without a node.
func (c *Cluster) bind(ctx context.Context, pod *corev1.Pod) error {
	if pod.Spec.NodeName != "" {
		return nil
	}
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: NodeName},
	}
	err := c.client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // bound or gone meanwhile
	}
	return err
}

func (c *Cluster) ensureExec(ctx context.Context, dyn dynamic.Interface, pod *corev1.Pod) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1",
		"kind":       "Exec",
		"metadata":   map[string]any{"name": pod.Name, "namespace": pod.Namespace},
		"spec": map[string]any{"execs": []any{map[string]any{
			"local": map[string]any{"envs": []any{
				map[string]any{"name": "POD_NAME", "value": pod.Name},
				map[string]any{"name": "POD_NAMESPACE", "value": pod.Namespace},
				map[string]any{"name": "POD_UID", "value": string(pod.UID)},
			}},
		}}},
	}}
	_, err := dyn.Resource(execGVR).Namespace(pod.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A pod re-created under the same name (StatefulSet-like): refresh.
		_ = dyn.Resource(execGVR).Namespace(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
		_, err = dyn.Resource(execGVR).Namespace(pod.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	}
	return err
}

// NodeReady fails unless node name is Ready: what Start waits for on
// kwok's node, and a Node on its kubelet's.
func (c *Cluster) NodeReady(ctx context.Context, name string) error {
	n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("node %s not Ready yet", name)
}

// ContainerStatus is the status of the named container of p, regular or
// init, or a zero status when p reports none for it yet.
func ContainerStatus(p *corev1.Pod, name string) corev1.ContainerStatus {
	for _, ss := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for _, s := range ss {
			if s.Name == name {
				return s
			}
		}
	}
	return corev1.ContainerStatus{}
}

// PodReady reports a pod whose Ready condition is true and that is not
// being deleted.
func PodReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodsSummary says where the selected pods of ns are and what they wait
// for, for an error message.
func (c *Cluster) PodsSummary(ctx context.Context, ns, selector string) string {
	pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, p := range pods.Items {
		s := fmt.Sprintf("%s %s node=%q", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue && cond.Message != "" {
				s += fmt.Sprintf(" %s: %s", cond.Type, cond.Message)
			}
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.State.Waiting != nil {
				s += fmt.Sprintf(" %s waiting: %s %s", st.Name, st.State.Waiting.Reason, st.State.Waiting.Message)
			}
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// Container is the pod's container (or init container) name; zero if it
// has none.
func Container(p *corev1.Pod, name string) corev1.Container {
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	return corev1.Container{}
}
