// Package mesh starts the whole local stack istio-aux runs in, for the test
// suites, the demo (make run), the recordings and the benchmarks: the
// control plane with the Job controller (test/cluster) and a node — kwok's
// simulation, or a real kubelet —, istiod as the sidecar injector
// (test/istio) and, on a real node, the images its pods run; then, when
// asked, istio-aux itself (test/istioaux). It also builds the workload they
// share, the reference demo's training Job (workload.go).
package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"golang.org/x/sync/errgroup"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/openshift"
	"github.com/istio-aux/istio-aux/test/realnode"
)

// Options say what Start runs.
type Options struct {
	// Node runs real kubelet nodes instead of kwok. The caller must run
	// inside RunInNetns's network namespace (realnode.RunInNetns).
	Node bool
	// Nodes is how many real nodes (default 1).
	Nodes int
	// Kubernetes is the control plane's version (one of
	// cluster.K8sVersions; "" the newest).
	Kubernetes string
	// Kubelets are the real nodes' kubelet and kube-proxy versions, node
	// by node ("" or missing: the control plane's).
	Kubelets []string
	// Istio is the release istiod and the proxies run (zero: istio.Main).
	Istio istio.Release
	// NativeSidecars is istiod's ENABLE_NATIVE_SIDECARS: "false" (the
	// default: classic sidecars), "true" or "auto".
	NativeSidecars string
	// CNI runs Istio's CNI node agent on the real nodes (its chart's
	// DaemonSet: the istio-cni plugin chained into each node's pod
	// network) and istiod with CNI on: pods get istio-validation, not
	// istio-init, and their traffic is captured for real.
	CNI bool
	// Revision installs istiod as that revision, with the revision tag
	// "default" pointing at it: namespaces select it by
	// istio.io/rev=default (InjectionLabels), never by istio-injection.
	// "" is Istio's default revision, selected by istio-injection=enabled.
	Revision string
	// Platform is the platform the mesh is shaped for: "openshift" runs
	// istiod with its OpenShift profile (its CNI is required) and the
	// OpenShift stand-in (test/openshift): namespaces get UID ranges, pods
	// are admitted under restricted-v2 with Pod Security restricted
	// enforced, and istio-aux installs from the release's OpenShift
	// variant.
	Platform string
	// Knative installs Knative Serving and its ingress (test/knative)
	// before istio-aux's first install (Shared.Installed), so that config/'s
	// function is a Knative Service rather than the Deployment Knative would
	// make of it.
	Knative bool
	// IstioAux starts istio-aux's webhook and all-in-one bridge too.
	IstioAux bool
	// Log receives every process's output; nil discards it.
	Log io.Writer
}

// Mesh is the running stack.
type Mesh struct {
	Cluster *cluster.Cluster
	Istiod  *istio.Istiod
	// CNI is Istio's CNI node agent (Options.CNI), nil without.
	CNI *istio.CNI
	// OpenShift is the OpenShift stand-in (Options.Platform), nil without.
	OpenShift *openshift.Standin
	Aux       *istioaux.IstioAux
	// Nodes are the real nodes (Options.Node), nil on kwok.
	Nodes *realnode.Nodes
	log   io.Writer
	opts  Options
}

// Start brings the stack up; on error everything started is stopped.
func Start(ctx context.Context, o Options) (m *Mesh, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.NativeSidecars == "" {
		o.NativeSidecars = "false"
	}
	if err := o.Istio.Built(); err != nil {
		return nil, err
	}
	if o.CNI && !o.Node {
		return nil, fmt.Errorf("Istio CNI needs real nodes (kwok's have no pod network)")
	}
	m = &Mesh{log: o.Log, opts: o}
	defer func() {
		if err != nil {
			_ = m.Stop()
			m = nil
		}
	}()
	var node cluster.Node
	if o.Node {
		m.Nodes = realnode.New(o.Nodes, o.Kubelets...)
		node = m.Nodes
	}
	if m.Cluster, err = cluster.Start(ctx, cluster.Options{Version: o.Kubernetes, ControllerManager: true, Kwok: !o.Node, Node: node, Log: o.Log}); err != nil {
		return m, err
	}
	injection = InjectionLabels(o)
	if o.Platform == "openshift" {
		if m.OpenShift, err = openshift.Start(ctx, m.Cluster, o.Log); err != nil {
			return m, fmt.Errorf("the OpenShift stand-in: %w", err)
		}
	}
	if o.Node {
		if err := PushImages(ctx, m.Cluster, o.Istio, o.CNI); err != nil {
			return m, err
		}
	}
	if o.CNI {
		if m.CNI, err = istio.InstallCNI(ctx, m.Cluster, o.Istio, nil); err != nil {
			return m, err
		}
	}
	if m.Istiod, err = istio.Start(ctx, m.Cluster, m.istiodOptions(o.NativeSidecars)); err != nil {
		return m, fmt.Errorf("starting istiod: %w", err)
	}
	if o.Revision != "" {
		if err := m.Istiod.Tag(ctx, DefaultTag); err != nil {
			return m, fmt.Errorf("tagging revision %s %s: %w", o.Revision, DefaultTag, err)
		}
	}
	if o.IstioAux {
		err = m.StartIstioAux(ctx)
	}
	return m, err
}

// StartIstioAux starts istio-aux's webhook and all-in-one bridge, unless
// they run.
func (m *Mesh) StartIstioAux(ctx context.Context) error {
	if m.Aux != nil {
		return nil
	}
	aux, err := istioaux.Start(ctx, m.Cluster, m.log)
	m.Aux = aux
	if err != nil {
		return fmt.Errorf("starting istio-aux: %w", err)
	}
	return nil
}

// istiodOptions is how the shape runs istiod, with ENABLE_NATIVE_SIDECARS
// native.
func (m *Mesh) istiodOptions(native string) istio.Options {
	o := m.opts
	return istio.Options{Release: o.Istio, NativeSidecars: native, Revision: o.Revision, CNI: o.CNI, Platform: o.Platform, Log: m.log}
}

// RestartIstiod runs istiod again with another ENABLE_NATIVE_SIDECARS.
func (m *Mesh) RestartIstiod(ctx context.Context, native string) error {
	if err := m.Istiod.Stop(); err != nil {
		fmt.Fprintf(m.log, "mesh| stopping istiod: %v\n", err)
	}
	var err error
	if m.Istiod, err = istio.Start(ctx, m.Cluster, m.istiodOptions(native)); err == nil && m.opts.Revision != "" {
		err = m.Istiod.Tag(ctx, DefaultTag)
	}
	return err
}

// Stop stops istio-aux, istiod and the cluster, in that order. The CNI
// node agent stops with its nodes.
func (m *Mesh) Stop() error {
	var errs []error
	if m.Aux != nil {
		errs = append(errs, m.Aux.Stop())
	}
	if m.Istiod != nil {
		errs = append(errs, m.Istiod.Stop())
	}
	if m.OpenShift != nil {
		errs = append(errs, m.OpenShift.Stop())
	}
	if m.Cluster != nil {
		errs = append(errs, m.Cluster.Stop())
	}
	return errors.Join(errs...)
}

// StartCanary is the first step of a canary upgrade of Istio: istiod of
// release r as revision rev beside the running one (its proxy image pushed
// to the nodes' registry), injecting only where a namespace or pod selects
// rev or a tag moved to it (Istiod.Tag). The mesh's istiod stays until
// Retire.
func (m *Mesh) StartCanary(ctx context.Context, r istio.Release, rev string) (*istio.Istiod, error) {
	if m.Nodes != nil {
		if err := PushImages(ctx, m.Cluster, r, false); err != nil {
			return nil, err
		}
	}
	o := m.istiodOptions(m.opts.NativeSidecars)
	o.Release, o.Revision = r, rev
	canary, err := istio.Start(ctx, m.Cluster, o)
	if err != nil {
		return nil, fmt.Errorf("starting istiod %s as revision %s: %w", r, rev, err)
	}
	return canary, nil
}

// Retire is a canary upgrade's last step: the mesh's istiod is removed (its
// webhook and any tag still pointing at it go, as `istioctl uninstall
// --revision` removes them) and canary becomes the mesh's istiod.
func (m *Mesh) Retire(canary *istio.Istiod) error {
	err := m.Istiod.Stop()
	m.Istiod = canary
	m.opts.Istio, m.opts.Revision = canary.Release(), canary.Revision()
	return err
}

// PushImages builds the real node's images and pushes them to its
// registry: the training app and the stand-in proxy (test/images), and the
// proxy image with the real pilot-agent of release r and the Envoy stand-in
// (test/istio), and with cni, r's CNI node agent.
func PushImages(ctx context.Context, c *cluster.Cluster, r istio.Release, cni bool) error {
	if err := istio.EnsureEnvoy(ctx); err != nil {
		return err
	}
	dir := filepath.Join(c.Dir(), "test-images")
	proxy := func(context.Context, string) (images.Image, error) {
		return istio.ProxyImageContents(r, istio.EnvoyBin())
	}
	builds := []func(context.Context, string) (images.Image, error){images.App, proxy}
	if cni {
		builds = append(builds, func(context.Context, string) (images.Image, error) { return istio.CNIImageContents(r) })
	}
	g, ctx := errgroup.WithContext(ctx)
	for _, build := range builds {
		g.Go(func() error {
			img, err := build(ctx, dir)
			if err != nil {
				return err
			}
			return realnode.PushImage(ctx, img)
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("images for the real node: %w", err)
	}
	return nil
}
