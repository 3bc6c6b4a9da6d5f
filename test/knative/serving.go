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

// ServingVersion is the knative.dev/serving version hack/tools/knative
// requires: the release whose knative.dev/pkg istio-aux's go.mod pins.
// TestServingVersionMatchesTools keeps them equal.
const ServingVersion = "v0.50.0"

// toolsDir is the tools module ko runs in, so that it builds Knative's
// ko:// import paths at the version that module requires.
func toolsDir() string { return filepath.Join(cluster.RepoRoot(), "hack", "tools", "knative") }

// modules are the directories, in the Go module cache, of the modules
// whose config/ the install reads.
type modules struct {
	serving, networking, caching string
}

// moduleDirs asks the tools module where knative.dev/serving and the
// networking and caching modules it pins are: their versions always follow
// serving's go.mod.
func moduleDirs(ctx context.Context) (modules, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}",
		"knative.dev/serving", "knative.dev/networking", "knative.dev/caching")
	cmd.Dir = toolsDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off")
	out, err := cmd.Output()
	if err != nil {
		return modules{}, fmt.Errorf("go list -m knative.dev/... in hack/tools/knative (run hack/build-knative.sh): %w", err)
	}
	dirs := strings.Fields(string(out))
	if len(dirs) != 3 {
		return modules{}, fmt.Errorf("go list -m knative.dev/...: %q, want three directories (is the module cache filled?)", out)
	}
	return modules{serving: dirs[0], networking: dirs[1], caching: dirs[2]}, nil
}

// crds are the CustomResourceDefinitions Serving's controllers watch:
// serving's own, and five that its git tree links from knative.dev/networking
// and knative.dev/caching, which the Go module zip drops (symlinks).
func (m modules) crds() ([]string, error) {
	own, err := filepath.Glob(filepath.Join(m.serving, "config", "core", "300-resources", "*.yaml"))
	if err != nil || len(own) == 0 {
		return nil, fmt.Errorf("no CRDs in %s/config/core/300-resources (%v)", m.serving, err)
	}
	linked := []string{filepath.Join(m.caching, "config", "image.yaml")}
	for _, f := range []string{"ingress", "certificate", "serverlessservice", "domain-claim"} {
		linked = append(linked, filepath.Join(m.networking, "config", f+".yaml"))
	}
	return append(own, linked...), nil
}

// Install installs Knative Serving and Traefik on c and waits until both
// work: Serving's four Deployments Available (the webhook among them, which
// every Knative object passes through) and Traefik Available.
func Install(ctx context.Context, c *cluster.Cluster, log io.Writer) error {
	start := time.Now()
	m, err := moduleDirs(ctx)
	if err != nil {
		return err
	}
	crds, err := m.crds()
	if err != nil {
		return err
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
	resolved, err := koResolve(ctx, filepath.Join(m.serving, "config", "core"))
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "harness| knative serving: ko resolve in %s\n", time.Since(start).Round(time.Millisecond))
	network, err := os.ReadFile(filepath.Join(m.networking, "config", "config-network.yaml"))
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
	fmt.Fprintf(log, "harness| knative serving %s and traefik installed in %s\n", ServingVersion, time.Since(start).Round(time.Millisecond))
	return nil
}

// koResolve builds the ko:// images of dir (recursively: config/core has
// sub-directories) into the node's registry, from the tools module, and
// returns the manifests with their references resolved to digests (so
// that Knative's controller never resolves a tag against the plain-HTTP
// registry).
func koResolve(ctx context.Context, dir string) ([]byte, error) {
	return realnode.KoResolve(ctx, toolsDir(), "knative", "--sbom=none", "-R", "-f", dir)
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
