package check

import (
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// defaultLeaseDuration is client-go's leader election default, for a
// Lease that does not say.
const defaultLeaseDuration = 15 * time.Second

// leader checks the Lease that elects the replica that watches pods: held,
// renewed within its duration, by a pod that exists and is Ready.
func (r *run) leader() Item {
	show := r.kubectl("get lease " + names.WatcherLease + " -o yaml")
	lease, err := r.Client.CoordinationV1().Leases(r.SystemNamespace).Get(r.ctx, names.WatcherLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return r.noLease(show)
	}
	if err != nil {
		return fail(ItemWatcher, fmt.Sprintf("reading Lease %s/%s: %v", r.SystemNamespace, names.WatcherLease, err), show)
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	duration := defaultLeaseDuration
	if lease.Spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	if holder == "" {
		return fail(ItemWatcher, "nobody holds Lease "+names.WatcherLease+": nothing watches pods", show)
	}
	if lease.Spec.RenewTime == nil {
		return fail(ItemWatcher, fmt.Sprintf("Lease %s, held by %s, was never renewed", names.WatcherLease, holder), show)
	}
	ago := r.Now().Sub(lease.Spec.RenewTime.Time)
	if ago > duration {
		return fail(ItemWatcher, fmt.Sprintf("Lease %s, held by %s, was last renewed %s ago (it lasts %s): no replica is watching pods",
			names.WatcherLease, holder, ago.Round(time.Second), duration), show)
	}
	pod, err := r.Client.CoreV1().Pods(r.SystemNamespace).Get(r.ctx, holder, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fail(ItemWatcher, fmt.Sprintf("Lease %s is held by pod %s, which does not exist", names.WatcherLease, holder), show)
	case err != nil:
		return fail(ItemWatcher, fmt.Sprintf("reading the holder of Lease %s: %v", names.WatcherLease, err), show)
	case !podReady(pod):
		return fail(ItemWatcher, fmt.Sprintf("Lease %s is held by pod %s, which is not Ready", names.WatcherLease, holder), r.kubectl("describe pod "+holder))
	}
	r.holder = holder
	return ok(ItemWatcher, fmt.Sprintf("pod %s watches (Ready, Lease %s renewed %s ago)", holder, names.WatcherLease, max(ago, 0).Round(time.Second)))
}

// noLease judges an install without the Lease: a bridge from before leader
// election still works if its Deployment is up.
func (r *run) noLease(show string) Item {
	if r.watcher == nil {
		return fail(ItemWatcher, fmt.Sprintf("no Lease %s and no Deployment %s or %s: nothing watches pods",
			names.WatcherLease, names.BridgeDeployment, names.AllInOneDeployment), r.kubectl("get deployments"))
	}
	state, up := available(r.watcher)
	if !up {
		return fail(ItemWatcher, fmt.Sprintf("no Lease %s, and Deployment %s is not available (%s): nothing watches pods",
			names.WatcherLease, r.watcher.Name, state), r.kubectl("describe deployment "+r.watcher.Name))
	}
	return warn(ItemWatcher, fmt.Sprintf("no Lease %s: Deployment %s (%s) elects no leader (a version before leader election?)",
		names.WatcherLease, r.watcher.Name, state), show)
}

// namespaces lists the namespaces whose pods the bridge watches: those
// watch.ScopeOf gives a scope.
func (r *run) namespaces() Item {
	show := fmt.Sprintf("kubectl get namespaces -L %s -L %s", keys.LabelEnabled, keys.LegacyLabel)
	l, err := r.Client.CoreV1().Namespaces().List(r.ctx, metav1.ListOptions{})
	if err != nil {
		return fail(ItemWatchedNamespaces, fmt.Sprintf("listing namespaces: %v", err), show)
	}
	var values []string
	whole := 0
	for _, ns := range l.Items {
		switch s := watch.ScopeOf(ns.Labels); s {
		case watch.ScopeAll:
			whole++
			values = append(values, ns.Name)
		case watch.ScopeLabelled:
			values = append(values, ns.Name+" (labelled pods only)")
		}
	}
	slices.Sort(values)
	if len(values) == 0 {
		return warn(ItemWatchedNamespaces, "no namespace is opted in: label one "+keys.LabelEnabled+"=true", show)
	}
	it := ok(ItemWatchedNamespaces, fmt.Sprintf("%d %s watched (%d whole, %d labelled pods only)", len(values),
		plural(len(values), "namespace"), whole, len(values)-whole))
	it.Command, it.Values = show, values
	return it
}

// plural is noun for n of them.
func plural(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}
