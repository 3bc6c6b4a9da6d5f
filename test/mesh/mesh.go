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
	Aux     *istioaux.IstioAux
	// Nodes are the real nodes (Options.Node), nil on kwok.
	Nodes *realnode.Nodes
	log   io.Writer
	istio istio.Release
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
	m = &Mesh{log: o.Log, istio: o.Istio}
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
	if o.Node {
		if err := PushImages(ctx, m.Cluster, o.Istio); err != nil {
			return m, err
		}
	}
	if m.Istiod, err = istio.Start(ctx, m.Cluster, istio.Options{Release: o.Istio, NativeSidecars: o.NativeSidecars, Log: o.Log}); err != nil {
		return m, fmt.Errorf("starting istiod: %w", err)
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

// RestartIstiod runs istiod again with another ENABLE_NATIVE_SIDECARS.
func (m *Mesh) RestartIstiod(ctx context.Context, native string) error {
	if err := m.Istiod.Stop(); err != nil {
		fmt.Fprintf(m.log, "mesh| stopping istiod: %v\n", err)
	}
	var err error
	m.Istiod, err = istio.Start(ctx, m.Cluster, istio.Options{Release: m.istio, NativeSidecars: native, Log: m.log})
	return err
}

// Stop stops istio-aux, istiod and the cluster, in that order.
func (m *Mesh) Stop() error {
	var errs []error
	if m.Aux != nil {
		errs = append(errs, m.Aux.Stop())
	}
	if m.Istiod != nil {
		errs = append(errs, m.Istiod.Stop())
	}
	if m.Cluster != nil {
		errs = append(errs, m.Cluster.Stop())
	}
	return errors.Join(errs...)
}

// PushImages builds the real node's images and pushes them to its
// registry: the training app and the stand-in proxy (test/images), and the
// proxy image with the real pilot-agent of release r and the Envoy stand-in
// (test/istio).
func PushImages(ctx context.Context, c *cluster.Cluster, r istio.Release) error {
	if err := istio.EnsureEnvoy(ctx); err != nil {
		return err
	}
	dir := filepath.Join(c.Dir(), "test-images")
	proxy := func(context.Context, string) (images.Image, error) {
		return istio.ProxyImageContents(r, istio.EnvoyBin())
	}
	g, ctx := errgroup.WithContext(ctx)
	for _, build := range []func(context.Context, string) (images.Image, error){images.App, proxy} {
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
