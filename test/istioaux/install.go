package istioaux

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/knative"
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
	// OpenShift is Config as the release's OpenShift variant ships it
	// (istio-aux-openshift.yaml: no pinned user, group or fsGroup).
	OpenShift = "config+openshift"
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
	base, err := releaseBase(ctx, "")
	if err != nil {
		return nil, err
	}
	return (&Installed{c: c, log: log, base: base, version: "v0.0.0-e2e"}).apply(ctx, dir, installWait)
}

// Upgrade applies dir again as a new release of istio-aux, as `ko apply`
// with a changed image: every image is built anew on a base image of its
// own (version in a file of it), so every workload rolls. It returns once
// the rollout is done and the webhook mutates pods.
func (in *Installed) Upgrade(ctx context.Context, version string) (*Installed, error) {
	base, err := releaseBase(ctx, version)
	if err != nil {
		return nil, err
	}
	return (&Installed{c: in.c, log: in.log, base: base, version: "v0.0.1-" + strings.TrimPrefix(version, "v")}).apply(ctx, in.dir, rolloutWait)
}

// releaseBase pushes to the node's registry the base image a release's
// images are built on, and returns it: the harness's non-root base, or
// for a tag, that base with a file of its own naming the tag, so that
// every image built on it is new bytes and every workload rolls.
func releaseBase(ctx context.Context, tag string) (images.Image, error) {
	base := images.NonRootBase
	if tag != "" {
		base.Ref += "-" + tag
		base.Files = append(slices.Clone(base.Files), images.File{Path: "/etc/istio-aux-release", Mode: 0o644, Data: []byte(tag + "\n")})
	}
	return base, realnode.PushImage(ctx, base)
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
	return next.apply(ctx, dir, installWait)
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

// How long apply waits for istio-aux's workloads. A rollout takes longer
// than an install: NATS's StatefulSet replaces one server at a time, and
// each first waits out its lame duck (config/nats/300-config.yaml: 5 s
// grace and 30 s of closing clients), then starts and catches up; on three
// nodes sharing two cores with every image new, a server took 80 s to
// come back, and three did not fit in 3 minutes (issue 43, item 7). Every
// node pulls every new image at once from the harness's registry on the
// same two cores: one NATS server took 2m34s to start (its image pulls
// most of it), so three need up to about 10 minutes here, which a
// cluster pulling from a registry of its own does not.
const (
	installWait = 3 * time.Minute
	rolloutWait = 12 * time.Minute
)

// apply resolves dir, applies it and waits until it works, its workloads
// Available within wait.
func (in *Installed) apply(ctx context.Context, dir string, wait time.Duration) (*Installed, error) {
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
	if err := in.WaitAvailable(ctx, wait); err != nil {
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
