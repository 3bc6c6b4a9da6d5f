package istioaux

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/test/knative"
	"github.com/istio-aux/istio-aux/test/poll"
)

// WaitAvailable waits until every Deployment in istio-aux's namespace is
// Available with all its replicas updated and ready, and every StatefulSet
// (config/nats) has all its replicas ready at its current revision.
func (in *Installed) WaitAvailable(ctx context.Context, timeout time.Duration) error {
	cs := in.c.Client()
	var pending []string
	err := poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		deps, err := cs.AppsV1().Deployments(SystemNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		sets, err := cs.AppsV1().StatefulSets(SystemNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pending = pending[:0]
		for _, d := range deps.Items {
			if !available(&d) {
				pending = append(pending, d.Name)
			}
		}
		for _, s := range sets.Items {
			want := ptr.Deref(s.Spec.Replicas, 1)
			if s.Status.ObservedGeneration < s.Generation || s.Status.ReadyReplicas != want ||
				s.Status.UpdatedReplicas != want || s.Status.CurrentRevision != s.Status.UpdateRevision {
				pending = append(pending, s.Name)
			}
		}
		return len(deps.Items) > 0 && len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("istio-aux's workloads %v not Available: %w (pods: %s)", pending, err,
			in.c.PodsSummary(ctx, SystemNamespace, ""))
	}
	return nil
}

// available reports a Deployment whose current generation is rolled out
// and Available.
func available(d *appsv1.Deployment) bool {
	want := ptr.Deref(d.Spec.Replicas, 1)
	if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want || d.Status.AvailableReplicas != want {
		return false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Scale sets a Deployment of istio-aux to replicas and waits until it has
// exactly that many pods, all ready (0: none left at all).
func (in *Installed) Scale(ctx context.Context, deployment string, replicas int32) error {
	deps := in.c.Client().AppsV1().Deployments(SystemNamespace)
	s, err := deps.GetScale(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.Spec.Replicas = replicas
	if _, err := deps.UpdateScale(ctx, deployment, s, metav1.UpdateOptions{}); err != nil {
		return err
	}
	return poll.Until(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		d, err := deps.Get(ctx, deployment, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pods, err := in.c.Client().CoreV1().Pods(SystemNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == int(replicas) && (replicas == 0 || available(d)), nil
	})
}

// SetConfig sets keys of config-istio-aux as a user does (an update of the
// ConfigMap, nothing restarted) and waits until every running replica that
// follows it (the bridge or the all-in-one, and the function's pods) has
// applied the change: a SettingsApplied Event on the ConfigMap naming the
// pod, after the update. A replica started since reads it at start.
func (in *Installed) SetConfig(ctx context.Context, data map[string]string) error {
	cs := in.c.Client()
	cms := cs.CoreV1().ConfigMaps(SystemNamespace)
	cm, err := cms.Get(ctx, names.ConfigMap, metav1.GetOptions{})
	if err != nil {
		return err
	}
	changed := false
	for k, v := range data {
		if old, ok := cm.Data[k]; !ok || old != v {
			cm.Data[k], changed = v, true
		}
	}
	if !changed {
		return nil // nothing to apply: no replica would say so
	}
	updated := time.Now().Add(-time.Second).Truncate(time.Second) // Events carry seconds
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return err
	}
	followers := []string{"app.kubernetes.io/component in (bridge,allinone)", "serving.knative.dev/service=proxy-quit"}
	return poll.Until(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		evs, err := cs.CoreV1().Events(SystemNamespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + settings.ReasonApplied})
		if err != nil {
			return false, err
		}
		for _, sel := range followers {
			pods, err := cs.CoreV1().Pods(SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				return false, err
			}
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || (p.Status.StartTime != nil && !p.Status.StartTime.Time.Before(updated)) {
					continue
				}
				if !appliedBy(evs.Items, p.Name, updated) {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

// appliedBy reports a SettingsApplied Event of pod at or after since.
func appliedBy(evs []corev1.Event, pod string, since time.Time) bool {
	for _, e := range evs {
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if e.InvolvedObject.Name == names.ConfigMap && strings.Contains(e.Message, " "+pod+" ") && !last.Before(since) {
			return true
		}
	}
	return false
}

// DeletePod deletes one pod of a Deployment or StatefulSet of istio-aux,
// by name, as `kubectl delete pod` does (with its grace period), and
// returns without waiting for a replacement.
func (in *Installed) DeletePod(ctx context.Context, workload string) error {
	cs := in.c.Client()
	var selector *metav1.LabelSelector
	if d, err := cs.AppsV1().Deployments(SystemNamespace).Get(ctx, workload, metav1.GetOptions{}); err == nil {
		selector = d.Spec.Selector
	} else if s, err := cs.AppsV1().StatefulSets(SystemNamespace).Get(ctx, workload, metav1.GetOptions{}); err == nil {
		selector = s.Spec.Selector
	} else if knative.Installed(in.c) {
		// A Knative Service's pods, once the autoscaler has started one
		// (it may be at zero).
		return in.deleteOnePod(ctx, knative.PodSelector(workload), time.Minute)
	} else {
		return fmt.Errorf("no Deployment or StatefulSet %s: %w", workload, err)
	}
	return in.deleteOnePod(ctx, metav1.FormatLabelSelector(selector), 0)
}

// deleteOnePod deletes a pod of istio-aux's namespace that selector
// selects and that is not being deleted, waiting up to wait for one.
func (in *Installed) deleteOnePod(ctx context.Context, selector string, wait time.Duration) error {
	pods := in.c.Client().CoreV1().Pods(SystemNamespace)
	var victim string
	err := poll.Until(ctx, wait+time.Second, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				victim = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no pod %s to delete: %w", selector, err)
	}
	return pods.Delete(ctx, victim, metav1.DeleteOptions{})
}
