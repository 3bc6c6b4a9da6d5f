package istioaux

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/knative"
	"github.com/istio-aux/istio-aux/test/poll"
	"github.com/istio-aux/istio-aux/test/realnode"
)

// The two ways users install istio-aux, as folders of this repository.
const (
	// Config is the full install: the webhook, the bridge, the function as
	// a Knative Service, and (config/nats, applied with it) NATS.
	Config = "config"
	// Standalone is the install without Knative or a NATS server: the
	// webhook and the all-in-one.
	Standalone = "config/standalone"
)

// Installed is istio-aux installed in a whole cluster the way users install
// it: `ko apply -f <folder>`, its images built by ko and pulled by the node
// from its registry.
type Installed struct {
	c   *cluster.Cluster
	log io.Writer
	dir string
	// base is the base image its images are built on.
	base images.Image
	// docs are what was applied, for Move.
	docs []*unstructured.Unstructured
	// version is what the release is made as (VERSION of hack/release.sh).
	version string
}

// Install runs `ko resolve -f dir` (dir is Config or Standalone, relative to
// the repository) with the node's registry as KO_DOCKER_REPO, applies the
// result, and waits until every workload of istio-aux is Available and
// the webhook mutates pods. The manifests are applied as they are, but for
// one overlay (knativeOverlay) where the cluster has no Knative Serving.
func Install(ctx context.Context, c *cluster.Cluster, dir string, log io.Writer) (*Installed, error) {
	if err := realnode.PushImage(ctx, images.NonRootBase); err != nil {
		return nil, err
	}
	return (&Installed{c: c, log: log, base: images.NonRootBase, version: "v0.0.0-e2e"}).apply(ctx, dir)
}

// Upgrade applies dir again as a new release of istio-aux, as `ko apply`
// with a changed image: every image is built anew on a base image of its
// own (version in a file of it), so every workload rolls. It returns once
// the rollout is done and the webhook mutates pods.
func (in *Installed) Upgrade(ctx context.Context, version string) (*Installed, error) {
	base := images.NonRootBase
	base.Ref += "-" + version
	base.Files = append(slices.Clone(base.Files), images.File{Path: "/etc/istio-aux-release", Mode: 0o644, Data: []byte(version + "\n")})
	if err := realnode.PushImage(ctx, base); err != nil {
		return nil, err
	}
	return (&Installed{c: in.c, log: in.log, base: base, version: "v0.0.1-" + strings.TrimPrefix(version, "v")}).apply(ctx, in.dir)
}

// Move changes the install to dir as a user moves between the two shapes:
// it deletes what only the current install has (the all-in-one; or the
// bridge, NATS and the function), then applies dir. What both share stays:
// the namespace, the webhook, the RBAC, and the exec policies with their
// ConfigMap. Deleting those too and re-creating them at once would leave
// the API server unable to find the policy's params, denying every quit
// (kubernetes/kubernetes#133827, seen here on v1.36.3).
func (in *Installed) Move(ctx context.Context, dir string) (*Installed, error) {
	next := &Installed{c: in.c, log: in.log, base: in.base, version: in.version}
	docs, err := next.resolve(ctx, dir)
	if err != nil {
		return nil, err
	}
	if gone := without(in.docs, docs); len(gone) > 0 {
		manifests, err := cluster.EncodeManifests(gone)
		if err != nil {
			return nil, err
		}
		if err := in.c.Delete(ctx, manifests); err != nil {
			return nil, err
		}
	}
	return next.apply(ctx, dir)
}

// apply resolves dir, applies it and waits until it works.
func (in *Installed) apply(ctx context.Context, dir string) (*Installed, error) {
	start := time.Now()
	docs, err := in.resolve(ctx, dir)
	if err != nil {
		return nil, err
	}
	in.dir, in.docs = dir, docs
	manifests, err := cluster.EncodeManifests(docs)
	if err != nil {
		return nil, err
	}
	// Plain `kubectl apply -f`, as a user applies a release.
	if err := in.c.ApplyPlain(ctx, manifests); err != nil {
		return nil, err
	}
	if err := in.WaitAvailable(ctx, 3*time.Minute); err != nil {
		return in, err
	}
	if err := WaitMutates(ctx, in.c.Client(), "default", HasHold, time.Minute); err != nil {
		return in, fmt.Errorf("the installed webhook never mutated a pod: %w", err)
	}
	for _, d := range in.docs {
		if isKnativeService(d) {
			if _, err := knative.WaitReady(ctx, in.c, d.GetNamespace(), d.GetName(), 2*time.Minute); err != nil {
				return in, err
			}
		}
	}
	fmt.Fprintf(in.log, "harness| istio-aux installed from %s in %s\n", dir, time.Since(start).Round(time.Millisecond))
	return in, nil
}

// resolve makes dir's release (hack/release.sh, as `make release` does,
// named for the node's registry) and copies its images into that registry
// with crane, as a user without ko does; it returns the release's
// documents as they will be applied.
func (in *Installed) resolve(ctx context.Context, dir string) ([]*unstructured.Unstructured, error) {
	start := time.Now()
	manifests, err := release(ctx, in.base, in.version, dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(in.log, "harness| make release (%s) and crane push in %s\n", dir, time.Since(start).Round(time.Millisecond))
	return knativeOverlay(in.c, manifests)
}

// release runs hack/release.sh for the shape dir without pushing, pushes
// its images from their layouts with crane, and returns the shape's YAML.
func release(ctx context.Context, base images.Image, version, dir string) ([]byte, error) {
	out, err := os.MkdirTemp("", "istio-aux-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(out)
	shape, file := "config", "istio-aux.yaml"
	if dir == Standalone {
		shape, file = "standalone", "istio-aux-standalone.yaml"
	}
	repo := realnode.RegistryAddr + "/istio-aux"
	cmd := exec.CommandContext(ctx, filepath.Join(cluster.RepoRoot(), "hack", "release.sh"))
	cmd.Dir = cluster.RepoRoot()
	cmd.Env = append(os.Environ(), "VERSION="+version, "KO_DOCKER_REPO="+repo, "RELEASE_DIR="+out,
		"RELEASE_SHAPES="+shape, "RELEASE_PUSH=0", "RELEASE_PLATFORM=linux/"+goruntime.GOARCH,
		"KO_DEFAULTBASEIMAGE="+realnode.RegistryAddr+strings.TrimPrefix(base.Ref, images.Registry), "GOPROXY=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("hack/release.sh: %w: %s", err, cluster.LastLines(string(b), 20))
	}
	untar := exec.CommandContext(ctx, "tar", "-C", out, "-xf", filepath.Join(out, "images.tar"))
	if b, err := untar.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tar -xf images.tar: %w: %s", err, b)
	}
	entries, err := os.ReadDir(filepath.Join(out, "images"))
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Name() == "blobs" {
			continue
		}
		push := exec.CommandContext(ctx, filepath.Join(realnode.ToolsBinDir(), "crane"), "push",
			filepath.Join(out, "images", e.Name()), repo+"/"+e.Name()+":"+version)
		if b, err := push.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("crane push %s: %w: %s", e.Name(), err, b)
		}
	}
	return os.ReadFile(filepath.Join(out, file))
}

// knativeOverlay decodes the resolved manifests, with the one difference
// between what the harness applies and config/, only on a cluster without
// Knative Serving: the function's Knative Service becomes the Deployment
// and Service Knative would make of it (its pod template, the revision's
// labels, PORT, and the cluster-local address
// http://proxy-quit.istio-aux.svc.cluster.local the bridge's K_SINK names).
// The README's stand-ins table says so.
func knativeOverlay(c *cluster.Cluster, manifests []byte) ([]*unstructured.Unstructured, error) {
	docs, err := cluster.DecodeManifests(manifests)
	if err != nil || knative.Installed(c) {
		return docs, err
	}
	var out []*unstructured.Unstructured
	for _, obj := range docs {
		if !isKnativeService(obj) {
			out = append(out, obj)
			continue
		}
		made, err := asDeployment(obj)
		if err != nil {
			return nil, err
		}
		for _, d := range made {
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
			if err != nil {
				return nil, err
			}
			out = append(out, &unstructured.Unstructured{Object: u})
		}
	}
	return out, nil
}

// isKnativeService reports a Knative Serving Service.
func isKnativeService(obj *unstructured.Unstructured) bool {
	return obj.GetAPIVersion() == "serving.knative.dev/v1" && obj.GetKind() == "Service"
}

// without is the documents of docs that other does not have (by kind,
// namespace and name).
func without(docs, other []*unstructured.Unstructured) []*unstructured.Unstructured {
	key := func(o *unstructured.Unstructured) string {
		return o.GroupVersionKind().GroupKind().String() + "/" + o.GetNamespace() + "/" + o.GetName()
	}
	keep := map[string]bool{}
	for _, o := range other {
		keep[key(o)] = true
	}
	var out []*unstructured.Unstructured
	for _, o := range docs {
		if !keep[key(o)] {
			out = append(out, o)
		}
	}
	return out
}

// asDeployment turns a Knative Service into a Deployment running its
// revision template and a Service in front of it on port 80, as Knative's
// networking would route a cluster-local address. Two pods on two nodes:
// what a Knative Service needs to outlive a node's loss (min-scale 2, and
// Knative's topology-spread feature on), since a Deployment, Knative's
// revisions included, replaces a pod on a dead node only once the node's
// pods are evicted, minutes later.
func asDeployment(ksvc *unstructured.Unstructured) ([]any, error) {
	var tmpl struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     corev1.PodSpec    `json:"spec"`
	}
	raw, found, err := unstructured.NestedMap(ksvc.Object, "spec", "template")
	if err != nil || !found {
		return nil, fmt.Errorf("knative service %s: no spec.template (%v)", ksvc.GetName(), err)
	}
	b, err := yaml.Marshal(raw)
	if err != nil {
		return nil, err
	}
	// Fields of a revision spec that a pod spec lacks (containerConcurrency,
	// timeoutSeconds) are Knative's, dropped here.
	if err := yaml.Unmarshal(b, &tmpl); err != nil {
		return nil, err
	}
	name, ns := ksvc.GetName(), ksvc.GetNamespace()
	if len(tmpl.Spec.Containers) != 1 {
		return nil, fmt.Errorf("knative service %s: %d containers, want 1", name, len(tmpl.Spec.Containers))
	}
	selector := map[string]string{"serving.knative.dev/service": name}
	labels := maps.Clone(selector)
	maps.Copy(labels, tmpl.Metadata.Labels)
	// Knative's defaults: the one container's first port (8080 without
	// one) is PORT, and probes without a port probe it.
	ctr := &tmpl.Spec.Containers[0]
	port := int32(8080)
	if len(ctr.Ports) > 0 {
		port = ctr.Ports[0].ContainerPort
	}
	ctr.Env = append(ctr.Env, corev1.EnvVar{Name: "PORT", Value: fmt.Sprint(port)})
	tmpl.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
		LabelSelector:    &metav1.LabelSelector{MatchLabels: selector},
	}}
	for _, p := range []*corev1.Probe{ctr.ReadinessProbe, ctr.LivenessProbe} {
		if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.IntValue() == 0 {
			p.HTTPGet.Port = intstr.FromInt32(port)
		}
	}
	dep := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: ksvc.GetLabels()},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: tmpl.Metadata.Annotations},
				Spec:       tmpl.Spec,
			},
		},
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: ksvc.GetLabels()},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(port)}},
		},
	}
	return []any{dep, svc}, nil
}

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

// Dir is the folder installed (Config or Standalone).
func (in *Installed) Dir() string { return in.dir }

// Watcher is the Deployment that watches pods and quits proxies: the bridge
// of Config, the all-in-one of Standalone.
func (in *Installed) Watcher() string {
	if in.dir == Standalone {
		return "istio-aux-allinone"
	}
	return "istio-aux-bridge"
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
