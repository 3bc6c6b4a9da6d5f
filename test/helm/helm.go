// Package helm drives a chart through its life with Helm's own code
// (helm.sh/helm/v4's actions, as the helm command runs them) against a
// test/cluster: pulled from an OCI registry, installed, upgraded, rolled
// back and uninstalled, and the objects a release holds. test/config runs
// it on an API server alone, test/node on a real node with Jobs.
package helm

import (
	"context"
	"fmt"
	"io"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/registry"
	"helm.sh/helm/v4/pkg/release"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// Client is `helm` with one kubeconfig, its releases' records in
// namespace (Secrets, Helm's default), speaking plain HTTP to registries
// (the harness's have no TLS; --plain-http).
type Client struct {
	cfg       *action.Configuration
	rc        *registry.Client
	namespace string
	dyn       dynamic.Interface
	mapper    *restmapper.DeferredDiscoveryRESTMapper
}

// New is a Client for c's cluster.
func New(c *cluster.Cluster, namespace string) (*Client, error) {
	rc, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard))
	if err != nil {
		return nil, err
	}
	kubeconfig := c.Kubeconfig()
	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig = &kubeconfig
	cfg := action.NewConfiguration()
	if err := cfg.Init(getter, namespace, "secret"); err != nil {
		return nil, err
	}
	cfg.RegistryClient = rc
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, rc: rc, namespace: namespace, dyn: dyn,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// Live is o as the cluster has it now: a NotFound error once it is gone.
func (h *Client) Live(ctx context.Context, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	gvk := o.GroupVersionKind()
	m, err := h.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		h.mapper.Reset()
		m, err = h.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", gvk, err)
	}
	ri := dynamic.ResourceInterface(h.dyn.Resource(m.Resource))
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = h.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	return ri.Get(ctx, o.GetName(), metav1.GetOptions{})
}

// Registry is the client `helm push` and `helm pull` use.
func (h *Client) Registry() *registry.Client { return h.rc }

// Pull fetches the chart at ref (oci://HOST/PATH/NAME) of version, as
// `helm install oci://…` does before it installs.
func (h *Client) Pull(ref, version string) (*chart.Chart, error) {
	// Install's chart options carry the configuration's registry client.
	opts := action.NewInstall(h.cfg)
	opts.Version, opts.PlainHTTP = version, true
	path, err := opts.LocateChart(ref, cli.New())
	if err != nil {
		return nil, fmt.Errorf("locating %s %s: %w", ref, version, err)
	}
	return loader.Load(path)
}

// Install is `helm install name`. Helm waits for nothing but hooks (the
// chart has none); the caller waits for what it needs.
func (h *Client) Install(ctx context.Context, name string, ch *chart.Chart, values map[string]any) error {
	install := action.NewInstall(h.cfg)
	install.ReleaseName, install.Namespace = name, h.namespace
	install.WaitStrategy = kube.HookOnlyStrategy
	if _, err := install.RunWithContext(ctx, ch, values); err != nil {
		return fmt.Errorf("helm install %s: %w", name, err)
	}
	return nil
}

// Upgrade is `helm upgrade name` to ch with values.
func (h *Client) Upgrade(ctx context.Context, name string, ch *chart.Chart, values map[string]any) error {
	upgrade := action.NewUpgrade(h.cfg)
	upgrade.Namespace, upgrade.WaitStrategy = h.namespace, kube.HookOnlyStrategy
	if _, err := upgrade.RunWithContext(ctx, name, ch, values); err != nil {
		return fmt.Errorf("helm upgrade %s: %w", name, err)
	}
	return nil
}

// Rollback is `helm rollback name revision`.
func (h *Client) Rollback(name string, revision int) error {
	rollback := action.NewRollback(h.cfg)
	rollback.Version, rollback.WaitStrategy = revision, kube.HookOnlyStrategy
	if err := rollback.Run(name); err != nil {
		return fmt.Errorf("helm rollback %s %d: %w", name, revision, err)
	}
	return nil
}

// Uninstall is `helm uninstall name`.
func (h *Client) Uninstall(name string) error {
	uninstall := action.NewUninstall(h.cfg)
	uninstall.WaitStrategy = kube.HookOnlyStrategy
	if _, err := uninstall.Run(name); err != nil {
		return fmt.Errorf("helm uninstall %s: %w", name, err)
	}
	return nil
}

// Objects is what release name holds now, as Helm recorded its manifest,
// and its revision.
func (h *Client) Objects(name string) ([]*unstructured.Unstructured, int, error) {
	rel, err := action.NewGet(h.cfg).Run(name)
	if err != nil {
		return nil, 0, fmt.Errorf("helm get %s: %w", name, err)
	}
	acc, err := release.NewAccessor(rel)
	if err != nil {
		return nil, 0, err
	}
	docs, err := cluster.DecodeManifests([]byte(acc.Manifest()))
	if err != nil {
		return nil, 0, err
	}
	if len(docs) == 0 {
		return nil, 0, fmt.Errorf("release %s holds no objects", name)
	}
	return docs, acc.Version(), nil
}
