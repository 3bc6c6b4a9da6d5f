package kubectl

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/internal/version"
	"github.com/istio-aux/istio-aux/kubectl/check"
)

// Versions is what version reports: the plugin's build and the images of
// every installed component (their builds are also their
// istio_aux_build_info metric).
type Versions struct {
	Plugin     version.Build `json:"plugin"`
	Components []Component   `json:"components"`
	// Error says why the installed components could not be read ("" when
	// they could).
	Error string `json:"error,omitempty"`
	// client: --client, the cluster not read.
	client bool
}

// Component is one container of one of istio-aux's workloads.
type Component struct {
	Workload  string `json:"workload"` // Kind/name
	Container string `json:"container"`
	Image     string `json:"image"`
	// Version is the image reference's tag (a release's version), Digest
	// its digest; either may be empty.
	Version string `json:"version,omitempty"`
	Digest  string `json:"digest,omitempty"`
	// Ready is ready/desired replicas, for Deployments and StatefulSets.
	Ready string `json:"ready,omitempty"`
}

// installedLabel selects istio-aux's workloads (config/ labels every one).
const installedLabel = "app.kubernetes.io/name=istio-aux"

// versions reads the components installed in namespace system.
func versions(ctx context.Context, cl Clients, system string) Versions {
	v := Versions{Plugin: version.Current()}
	opts := metav1.ListOptions{LabelSelector: installedLabel}
	add := func(workload, ready string, containers []containerImage) {
		for _, c := range containers {
			tag, digest := splitImage(c.image)
			v.Components = append(v.Components, Component{Workload: workload, Container: c.name, Image: c.image,
				Version: tag, Digest: digest, Ready: ready})
		}
	}
	deps, err := cl.Kube.AppsV1().Deployments(system).List(ctx, opts)
	if err != nil {
		v.Error = fmt.Sprintf("listing the Deployments of %s: %v", system, err)
		return v
	}
	for _, d := range deps.Items {
		add("Deployment/"+d.Name, ready(d.Status.ReadyReplicas, d.Spec.Replicas), imagesOf(d.Spec.Template.Spec))
	}
	sts, err := cl.Kube.AppsV1().StatefulSets(system).List(ctx, opts)
	if err != nil {
		v.Error = fmt.Sprintf("listing the StatefulSets of %s: %v", system, err)
		return v
	}
	for _, s := range sts.Items {
		add("StatefulSet/"+s.Name, ready(s.Status.ReadyReplicas, s.Spec.Replicas), imagesOf(s.Spec.Template.Spec))
	}
	// The function's Knative Service, where Knative is installed (its
	// absence, or its CRD's, is no error: the standalone shape has none).
	if cl.Dynamic != nil {
		if ks, err := cl.Dynamic.Resource(check.KnativeServices).Namespace(system).List(ctx, opts); err == nil {
			for _, k := range ks.Items {
				add("Service.serving.knative.dev/"+k.GetName(), "", knativeContainers(k))
			}
		}
	}
	slices.SortStableFunc(v.Components, func(a, b Component) int { return strings.Compare(a.Workload, b.Workload) })
	return v
}

type containerImage struct{ name, image string }

// imagesOf is the images of a pod spec's containers (not its init
// containers: they do not run the component).
func imagesOf(spec corev1.PodSpec) []containerImage {
	var out []containerImage
	for _, c := range spec.Containers {
		out = append(out, containerImage{c.Name, c.Image})
	}
	return out
}

// ready is ready/desired replicas (desired defaults to 1, as the API's).
func ready(readyReplicas int32, desired *int32) string {
	return fmt.Sprintf("%d/%d", readyReplicas, ptr.Deref(desired, 1))
}

func knativeContainers(k unstructured.Unstructured) []containerImage {
	cs, _, _ := unstructured.NestedSlice(k.Object, "spec", "template", "spec", "containers")
	var out []containerImage
	for _, c := range cs {
		m, _ := c.(map[string]any)
		name, _ := m["name"].(string)
		image, _ := m["image"].(string)
		out = append(out, containerImage{name, image})
	}
	return out
}

// splitImage is an image reference's tag and digest: REPO[:TAG][@DIGEST],
// where REPO may hold a registry's port.
func splitImage(ref string) (tag, digest string) {
	ref, digest, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		tag = ref[i+1:]
	}
	return tag, digest
}

func printVersions(w io.Writer, v Versions) {
	p := v.Plugin
	fmt.Fprintf(w, "plugin: %s", p.Version)
	if p.Revision != "" {
		fmt.Fprintf(w, " (revision %s)", p.Revision)
	}
	fmt.Fprintf(w, ", %s\n", p.GoVersion)
	if v.client {
		return
	}
	if v.Error != "" {
		fmt.Fprintf(w, "installed: unknown: %s\n", v.Error)
		return
	}
	if len(v.Components) == 0 {
		fmt.Fprintln(w, "installed: nothing labelled "+installedLabel)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tCONTAINER\tVERSION\tREADY\tIMAGE")
	for _, c := range v.Components {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Workload, c.Container, or(c.Version, "-"), or(c.Ready, "-"), c.Image)
	}
	_ = tw.Flush()
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer, connect Connector) int {
	c := newCommon("version")
	client := c.flags.Bool("client", false, "Print the plugin's version only, reading no cluster")
	synopsis := "Usage: kubectl istio-aux version [--client] [-o text|json]\n\n" +
		"Prints the plugin's build and, for each container of istio-aux's workloads, its image's version\n" +
		"(its tag), digest and readiness. Each component also serves its build as istio_aux_build_info."
	if code := c.parse(args, synopsis, stdout, stderr); code >= 0 {
		return code
	}
	if c.flags.NArg() > 0 {
		fmt.Fprintf(stderr, "version takes no arguments, got %q\n", c.flags.Args())
		return ExitUsage
	}
	v := Versions{Plugin: version.Current(), client: *client}
	code := ExitOK
	if !*client {
		cl, err := c.clients(connect)
		if err != nil {
			v.Error = err.Error()
		} else {
			v = versions(ctx, cl, c.system)
		}
		if v.Error != "" {
			code = ExitProblem
		}
	}
	if err := write(stdout, c.output, v, func(w io.Writer) { printVersions(w, v) }); err != nil {
		fmt.Fprintln(stderr, err)
		return ExitProblem
	}
	return code
}
