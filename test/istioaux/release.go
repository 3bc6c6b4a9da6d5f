package istioaux

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
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

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/knative"
	"github.com/istio-aux/istio-aux/test/realnode"
)

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
	switch dir {
	case Standalone:
		shape, file = "standalone", "istio-aux-standalone.yaml"
	case OpenShift:
		shape, file = "openshift", "istio-aux-openshift.yaml"
	}
	repo := realnode.RegistryAddr + "/istio-aux"
	if err := makeRelease(ctx, base, version, out, "RELEASE_SHAPES="+shape, "RELEASE_PUSH=0"); err != nil {
		return nil, err
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

// Published is a release of istio-aux as `make release` publishes it to
// the node's registry: every image pushed and signed, and the Helm chart,
// which pins them by digest, pushed and signed as an OCI artifact.
type Published struct {
	// Chart is the chart's repository (oci://REGISTRY/istio-aux/charts/istio-aux)
	// and Version its version: what `helm install Chart --version Version`
	// takes. Digest is the chart's manifest digest, as signed.
	Chart, Version, Digest string
}

// Publish makes the release version of both shapes (the chart holds both)
// with `make release`'s pushes and signatures, its images built on a base
// of their own for tag ("" for the harness's base: see releaseBase), and
// returns where its chart is.
func Publish(ctx context.Context, version, tag string) (Published, error) {
	base, err := releaseBase(ctx, tag)
	if err != nil {
		return Published{}, err
	}
	out, err := os.MkdirTemp("", "istio-aux-release-")
	if err != nil {
		return Published{}, err
	}
	defer os.RemoveAll(out)
	if err := makeRelease(ctx, base, version, out, "RELEASE_SHAPES=config standalone", "RELEASE_PUSH=1"); err != nil {
		return Published{}, err
	}
	b, err := os.ReadFile(filepath.Join(out, "chart-ref.txt"))
	if err != nil {
		return Published{}, fmt.Errorf("the release pushed no chart: %w", err)
	}
	// REGISTRY/istio-aux/charts/istio-aux:VERSION@sha256:…
	ref, digest, ok := strings.Cut(strings.TrimSpace(string(b)), "@")
	repo, tagged, ok2 := strings.Cut(ref, ":"+strings.TrimPrefix(version, "v"))
	if !ok || !ok2 || tagged != "" {
		return Published{}, fmt.Errorf("chart-ref.txt: %q: want REPOSITORY:%s@DIGEST", b, strings.TrimPrefix(version, "v"))
	}
	return Published{Chart: "oci://" + repo, Version: strings.TrimPrefix(version, "v"), Digest: digest}, nil
}

// Helmed is istio-aux installed in c from dir's shape by something other
// than the harness (Helm): what WaitAvailable, DeletePod and Watcher need.
func Helmed(c *cluster.Cluster, dir string) *Installed { return &Installed{c: c, dir: dir} }

// makeRelease runs hack/release.sh as `make release VERSION=version` with
// the node's registry as KO_DOCKER_REPO, into out, for this machine's
// platform only, built on base, offline; env adds to its environment.
func makeRelease(ctx context.Context, base images.Image, version, out string, env ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(cluster.RepoRoot(), "hack", "release.sh"))
	cmd.Dir = cluster.RepoRoot()
	cmd.Env = append(os.Environ(), "VERSION="+version, "KO_DOCKER_REPO="+realnode.RegistryAddr+"/istio-aux", "RELEASE_DIR="+out,
		"RELEASE_PLATFORM=linux/"+goruntime.GOARCH, "RELEASE_PLUGIN_PLATFORMS=linux/"+goruntime.GOARCH,
		"KO_DEFAULTBASEIMAGE="+realnode.RegistryAddr+strings.TrimPrefix(base.Ref, images.Registry), "GOPROXY=off")
	cmd.Env = append(cmd.Env, env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("hack/release.sh: %w: %s", err, cluster.LastLines(string(b), 20))
	}
	return nil
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
		return nil, fmt.Errorf("knative service %s: no spec.template (%w)", ksvc.GetName(), err)
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
