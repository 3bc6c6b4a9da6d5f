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
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/helm"
	"github.com/istio-aux/istio-aux/test/modroot"
	"github.com/istio-aux/istio-aux/test/poll"
)

// TestHelmInstallUpgradeRollbackUninstall drives charts/istio-aux through
// its life with Helm's own code (helm.sh/helm/v4's actions, as the helm
// command runs them) against a real API server: packaged and pushed to an
// OCI registry as `helm push` does, `helm install oci://…` of the
// standalone shape, `helm upgrade` to a newer build (other images), `helm
// rollback` to the first, and `helm uninstall`, after which nothing the
// chart made is left. No node runs here: the Jobs' story under Helm is
// test/node's TestNodeHelm.
func TestHelmInstallUpgradeRollbackUninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The controller manager's namespace controller finishes the namespace's
	// deletion at uninstall.
	c, a := start(ctx, t, cluster.Options{ControllerManager: true})

	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	h, err := helm.New(c, "default")
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
	if _, err := h.Registry().Push(data, host+"/charts/istio-aux:"+version); err != nil {
		t.Fatalf("helm push: %v", err)
	}

	pulled, err := h.Pull("oci://"+host+"/charts/istio-aux", version)
	if err != nil {
		t.Fatal(err)
	}
	values := func(tag string) map[string]any {
		return map[string]any{"standalone": true, "images": map[string]any{
			"webhook":  "registry.invalid/istio-aux/webhook:" + tag,
			"allinone": "registry.invalid/istio-aux/allinone:" + tag,
		}}
	}
	if err := h.Install(ctx, "istio-aux", pulled, values("v1")); err != nil {
		t.Fatal(err)
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
	made := releaseObjects(t, h, "istio-aux")
	for _, d := range made {
		if _, err := a.live(ctx, d); err != nil {
			t.Errorf("after helm install: %s: %v", d, err)
		}
	}
	if err := h.Upgrade(ctx, "istio-aux", pulled, values("v2")); err != nil {
		t.Fatal(err)
	}
	images("v2")
	if err := h.Rollback("istio-aux", 1); err != nil {
		t.Fatal(err)
	}
	images("v1")
	if err := h.Uninstall("istio-aux"); err != nil {
		t.Fatal(err)
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

// releaseObjects is what the release holds now, as documents.
func releaseObjects(t *testing.T, h *helm.Client, name string) []doc {
	t.Helper()
	docs, _, err := h.Objects(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]doc, 0, len(docs))
	for _, o := range docs {
		out = append(out, doc{file: "charts/istio-aux", obj: o})
	}
	return out
}
