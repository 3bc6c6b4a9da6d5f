// Package knative installs Knative Serving on the real node's whole cluster
// (test/realnode), as its users install it: the release's
// own config/core manifests, read at run time from the Go module cache,
// their images built by ko into the node's registry; and Traefik as the
// networking layer. Nothing of Knative's is copied into this repository.
package knative

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/realnode"
)

// Namespace is Knative Serving's system namespace (config/core/100-namespace.yaml).
const Namespace = "knative-serving"

// Release is a Knative Serving release the harness installs: its
// knative.dev/serving module version, the module file of hack/tools/knative
// that requires it (hack/build-knative.sh compiles each), and the oldest
// Kubernetes minor (1.x) it starts on: its knative.dev/pkg's minimum.
type Release struct {
	// Name is Knative's own release name ("1.23").
	Name string
	// Serving is the knative.dev/serving version ("v0.50.0").
	Serving string
	// ModFile is the module file of hack/tools/knative that requires it.
	ModFile string
	// MinKubernetesMinor is the oldest Kubernetes minor it starts on.
	MinKubernetesMinor int
}

var (
	// Newest is the release whose knative.dev/pkg istio-aux's go.mod pins
	// (TestVersionsMatchTools keeps them together): Kubernetes 1.34 and
	// newer.
	Newest = Release{Name: "1.23", Serving: "v0.50.0", ModFile: "go.mod", MinKubernetesMinor: 34}
	// R117 is Knative 1.17, the release OpenShift Serverless 1.37 ships:
	// it starts on Kubernetes 1.30 and newer, so on OpenShift 4.18's 1.31
	// and 4.19's 1.32, where Newest does not start.
	R117 = Release{Name: "1.17", Serving: "v0.44.1", ModFile: "v1.17.mod", MinKubernetesMinor: 30}
	// Releases are every release the harness installs, newest first.
	Releases = []Release{Newest, R117}
)

// For returns the newest of Releases that starts on a control plane of
// Kubernetes version ("v1.32.13"), and false if none does.
func For(version string) (Release, bool) {
	var minor int
	if _, err := fmt.Sscanf(version, "v1.%d.", &minor); err != nil {
		return Release{}, false
	}
	for _, r := range Releases {
		if minor >= r.MinKubernetesMinor {
			return r, true
		}
	}
	return Release{}, false
}

// String names the release as the shapes and logs do.
func (r Release) String() string { return r.Name + " (knative.dev/serving " + r.Serving + ")" }

// goflags makes the go command, and ko through it, use r's module file.
func (r Release) goflags() string { return "GOFLAGS=-mod=mod -modfile=" + r.ModFile }

// toolsDir is the tools module ko runs in, so that it builds Knative's
// ko:// import paths at the version that module requires.
func toolsDir() string { return filepath.Join(cluster.RepoRoot(), "hack", "tools", "knative") }

// moduleDirs asks the tools module where knative.dev/serving and the
// networking and caching modules it pins are, in that order: their versions
// always follow serving's go.mod.
func moduleDirs(ctx context.Context, r Release) ([]string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}",
		"knative.dev/serving", "knative.dev/networking", "knative.dev/caching")
	cmd.Dir = toolsDir()
	cmd.Env = append(os.Environ(), r.goflags(), "GOPROXY=off")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m knative.dev/... in hack/tools/knative with %s (run hack/build-knative.sh %s): %w", r.ModFile, r.ModFile, err)
	}
	dirs := strings.Fields(string(out))
	if len(dirs) != 3 {
		return nil, fmt.Errorf("go list -m knative.dev/...: %q, want three directories (is the module cache filled?)", out)
	}
	return dirs, nil
}

// Install installs Knative Serving release r and Traefik on c and waits
// until both work: Serving's four Deployments Available (the webhook among
// them, which every Knative object passes through) and Traefik Available.
func Install(ctx context.Context, c *cluster.Cluster, r Release, log io.Writer) error {
	start := time.Now()
	dirs, err := moduleDirs(ctx, r)
	if err != nil {
		return err
	}
	serving, networking, caching := dirs[0], dirs[1], dirs[2]
	// The CRDs Serving's controllers watch: serving's own, and five that its
	// git tree links from knative.dev/networking and knative.dev/caching,
	// which the Go module zip drops (symlinks).
	crds, err := filepath.Glob(filepath.Join(serving, "config", "core", "300-resources", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return fmt.Errorf("no CRDs in %s/config/core/300-resources (%w)", serving, err)
	}
	crds = append(crds, filepath.Join(caching, "config", "image.yaml"))
	for _, f := range []string{"ingress", "certificate", "serverlessservice", "domain-claim"} {
		crds = append(crds, filepath.Join(networking, "config", f+".yaml"))
	}
	var crdYAML []byte
	for _, f := range crds {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crdYAML = append(append(crdYAML, "\n---\n"...), b...)
	}
	if err := c.Apply(ctx, crdYAML); err != nil {
		return err
	}
	if err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"); err != nil {
		return err
	}
	if err := realnode.PushImage(ctx, images.NonRootBase); err != nil {
		return err
	}
	// ko builds the ko:// images of config/core (recursively: it has
	// sub-directories) into the node's registry, from the tools module, and
	// resolves their references to digests (so that Knative's controller
	// never resolves a tag against the plain-HTTP registry).
	resolved, err := realnode.KoResolve(ctx, toolsDir(), "knative", []string{r.goflags()}, "--sbom=none", "-R", "-f", filepath.Join(serving, "config", "core"))
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "harness| knative serving: ko resolve in %s\n", time.Since(start).Round(time.Millisecond))
	network, err := os.ReadFile(filepath.Join(networking, "config", "config-network.yaml"))
	if err != nil {
		return err
	}
	docs, err := cluster.DecodeManifests(append(append(resolved, "\n---\n"...), network...))
	if err != nil {
		return err
	}
	if err := testOverlay(docs); err != nil {
		return err
	}
	manifests, err := cluster.EncodeManifests(docs)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, manifests); err != nil {
		return err
	}
	if err := installTraefik(ctx, c); err != nil {
		return err
	}
	for _, ns := range []string{Namespace, traefikNamespace} {
		if err := c.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Available", "--timeout=3m", "deployment", "--all"); err != nil {
			return fmt.Errorf("%s not Available: %w (pods: %s)", ns, err, c.PodsSummary(ctx, ns, ""))
		}
	}
	fmt.Fprintf(log, "harness| knative serving %s and traefik installed in %s\n", r, time.Since(start).Round(time.Millisecond))
	return nil
}

// find returns the document of kind and name, or nil.
func find(docs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, d := range docs {
		if d.GetKind() == kind && d.GetName() == name {
			return d
		}
	}
	return nil
}
