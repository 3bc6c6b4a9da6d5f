//go:build e2e

package config

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/cli"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/registry"
	"helm.sh/helm/v4/pkg/release"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/modroot"
	"github.com/istio-aux/istio-aux/test/poll"
)

// TestHelmInstallUpgradeRollbackUninstall drives charts/istio-aux through
// its life with Helm's own code (helm.sh/helm/v4's actions, as the helm
// command runs them) against a real API server: packaged and pushed to an
// OCI registry as `helm push` does, `helm install oci://…` of the
// standalone shape, `helm upgrade` to a newer build (other images), `helm
// rollback` to the first, and `helm uninstall`, after which nothing the
// chart made is left. No node runs here: the Jobs' story under Helm is the
// real-node suite's to tell (not yet).
func TestHelmInstallUpgradeRollbackUninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The controller manager's namespace controller finishes the namespace's
	// deletion at uninstall.
	c, a := start(ctx, t, cluster.Options{ControllerManager: true})

	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	rc, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	const version = "0.0.0-e2e"
	ch, err := loader.Load(filepath.Join(modroot.Dir(), "charts", "istio-aux"))
	if err != nil {
		t.Fatal(err)
	}
	ch.Metadata.Version = version
	archive, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Push(data, host+"/charts/istio-aux:"+version); err != nil {
		t.Fatalf("helm push: %v", err)
	}

	kubeconfig := c.Kubeconfig()
	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig = &kubeconfig
	cfg := action.NewConfiguration()
	if err := cfg.Init(getter, "default", "secret"); err != nil {
		t.Fatal(err)
	}
	cfg.RegistryClient = rc

	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = "istio-aux", "default"
	install.WaitStrategy = kube.HookOnlyStrategy
	install.Version, install.PlainHTTP = version, true
	install.SetRegistryClient(rc)
	path, err := install.LocateChart("oci://"+host+"/charts/istio-aux", cli.New())
	if err != nil {
		t.Fatalf("locating oci://%s/charts/istio-aux: %v", host, err)
	}
	pulled, err := loader.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	values := func(tag string) map[string]any {
		return map[string]any{"standalone": true, "images": map[string]any{
			"webhook":  "registry.invalid/istio-aux/webhook:" + tag,
			"allinone": "registry.invalid/istio-aux/allinone:" + tag,
		}}
	}
	if _, err := install.RunWithContext(ctx, pulled, values("v1")); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	images := func(want string) {
		t.Helper()
		for _, name := range []string{"istio-aux-webhook", "istio-aux-allinone"} {
			d, err := c.Client().AppsV1().Deployments("istio-aux").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("deployment %s: %v", name, err)
			}
			if got := d.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(got, ":"+want) {
				t.Errorf("deployment %s runs %s, want the %s build", name, got, want)
			}
		}
	}
	images("v1")
	made := releaseObjects(t, cfg, "istio-aux")
	for _, d := range made {
		if _, err := a.live(ctx, d); err != nil {
			t.Errorf("after helm install: %s: %v", d, err)
		}
	}

	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace, upgrade.WaitStrategy = "default", kube.HookOnlyStrategy
	if _, err := upgrade.RunWithContext(ctx, "istio-aux", pulled, values("v2")); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	images("v2")

	rollback := action.NewRollback(cfg)
	rollback.Version, rollback.WaitStrategy = 1, kube.HookOnlyStrategy
	if err := rollback.Run("istio-aux"); err != nil {
		t.Fatalf("helm rollback: %v", err)
	}
	images("v1")

	uninstall := action.NewUninstall(cfg)
	uninstall.WaitStrategy = kube.HookOnlyStrategy
	if _, err := uninstall.Run("istio-aux"); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	err = poll.Until(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		for _, d := range made {
			if _, err := a.live(ctx, d); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for _, d := range made {
			if _, gerr := a.live(ctx, d); !apierrors.IsNotFound(gerr) {
				t.Errorf("after helm uninstall: %s is still there (%v)", d, gerr)
			}
		}
		t.Fatalf("helm uninstall left objects behind: %v", err)
	}
	t.Logf("installed from oci://%s, upgraded, rolled back and uninstalled: %d objects, none left", host, len(made))
}

// releaseObjects is what the release holds now: its manifest, as Helm
// stored it, as documents.
func releaseObjects(t *testing.T, cfg *action.Configuration, name string) []doc {
	t.Helper()
	rel, err := action.NewGet(cfg).Run(name)
	if err != nil {
		t.Fatalf("helm get %s: %v", name, err)
	}
	acc, err := release.NewAccessor(rel)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := cluster.DecodeManifests([]byte(acc.Manifest()))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]doc, 0, len(docs))
	for _, o := range docs {
		out = append(out, doc{file: "charts/istio-aux", obj: o})
	}
	if len(out) == 0 {
		t.Fatal("the release holds no objects")
	}
	return out
}
