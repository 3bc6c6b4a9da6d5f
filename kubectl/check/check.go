package check

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/kubectl/install"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// Checker checks the install in SystemNamespace. Dynamic reads the Knative
// Service; nil skips it as if Knative Serving were not installed.
type Checker struct {
	Client          kubernetes.Interface
	Dynamic         dynamic.Interface
	SystemNamespace string
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// run is one Run under way: what the items learn that later ones use.
type run struct {
	Checker
	ctx     context.Context
	shape   string
	watcher *appsv1.Deployment // the bridge, or the all-in-one; nil when missing
	config  install.Config
	holder  string // the Lease holder's pod, when it is Ready
	// What the webhook's configuration says of its failure policy:
	// whether there is none, the webhooks set to Ignore, and whether any
	// is set to Fail.
	noConfiguration bool
	ignoring        []string
	failing         bool
	ksvc            *unstructured.Unstructured // the function's Knative Service, when there is one
}

// Run checks every item. It never fails as a whole: an item it cannot read
// fails with the reason.
func (c Checker) Run(ctx context.Context) Report {
	if c.Now == nil {
		c.Now = time.Now
	}
	r := &run{Checker: c, ctx: ctx, shape: ShapeConfig}
	if d, err := r.deployment(names.AllInOneDeployment); err == nil && d != nil {
		r.shape, r.watcher = ShapeStandalone, d
	} else if d, err := r.deployment(names.BridgeDeployment); err == nil {
		r.watcher = d
	}
	items := append([]Item{r.kubernetes()}, r.webhook()...)
	items = append(items, r.configItem(), r.execPolicy(), r.leader(), r.namespaces(), r.nats(), r.backlog(), r.function())
	if r.ksvc != nil {
		items = append(items, r.functionNodeLoss())
	}
	rep := Report{Shape: r.shape, Items: items}
	rep.OK = rep.Worst() != StatusFail
	return rep
}

// deployment reads a Deployment of the system namespace; nil, nil when it
// does not exist.
func (r *run) deployment(name string) (*appsv1.Deployment, error) {
	d, err := r.Client.AppsV1().Deployments(r.SystemNamespace).Get(r.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Deployment %s/%s: %w", r.SystemNamespace, name, err)
	}
	return d, nil
}

// available is a Deployment's state in a phrase, and whether it is
// Available with at least one ready replica.
func available(d *appsv1.Deployment) (string, bool) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	state := fmt.Sprintf("%d/%d ready", d.Status.ReadyReplicas, want)
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return state, c.Status == corev1.ConditionTrue && d.Status.ReadyReplicas > 0
		}
	}
	return state, false
}

// podReady reports whether a pod is Ready and not being deleted.
func podReady(p *corev1.Pod) bool {
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

// kubectl is a command for the user, in the system namespace.
func (r *run) kubectl(args string) string { return "kubectl -n " + r.SystemNamespace + " " + args }
