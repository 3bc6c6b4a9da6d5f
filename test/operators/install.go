package operators

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/poll"
	"github.com/istio-aux/istio-aux/test/realnode"
)

//go:embed overlays
var overlays embed.FS

// Install installs the operators in order, each Available before the next
// starts: its image pushed to the node's registry, its overlay rendered
// against its module, its webhook Secret filled (WebhookCert.SecretData),
// everything applied server-side (the CRDs are too large for the
// last-applied annotation). The training operator also gets the training
// image (test/images.Python) its PyTorchJob workers' init container runs;
// Trainer gets the torch-distributed ClusterTrainingRuntime its module
// ships.
func Install(ctx context.Context, c *cluster.Cluster, log io.Writer, ops ...Operator) error {
	if err := Built(ops...); err != nil {
		return err
	}
	for _, o := range ops {
		start := time.Now()
		if err := install(ctx, c, o); err != nil {
			return fmt.Errorf("installing %s %s: %w", o.Name, o.Version, err)
		}
		fmt.Fprintf(log, "harness| %s %s installed and Available in %s\n", o.Name, o.Version, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func install(ctx context.Context, c *cluster.Cluster, o Operator) error {
	if err := realnode.PushImage(ctx, o.Image()); err != nil {
		return err
	}
	if o.Name == TrainingOperator.Name {
		if err := PushPython(ctx, c); err != nil {
			return err
		}
	}
	manifests, err := Render(ctx, c, o)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, manifests); err != nil {
		return err
	}
	if err := waitAvailable(ctx, c, o, 3*time.Minute); err != nil {
		return err
	}
	if o.Name == Trainer.Name {
		dir, err := o.ModuleDir(ctx)
		if err != nil {
			return err
		}
		runtime, err := os.ReadFile(filepath.Join(dir, "manifests", "base", "runtimes", "torch_distributed.yaml"))
		if err != nil {
			return err
		}
		// Through the trainer's validating webhook: served once its
		// Service has the ready pod behind it.
		return ApplyWhenServed(ctx, c, runtime)
	}
	return nil
}

// PushPython builds the training image (test/images.Python) and pushes it
// to the node's registry.
func PushPython(ctx context.Context, c *cluster.Cluster) error {
	img, err := images.Python(ctx, filepath.Join(c.Dir(), "python-image"))
	if err != nil {
		return err
	}
	return realnode.PushImage(ctx, img)
}

// Render is what `kubectl kustomize` makes of the operator's overlay
// (overlays/<name>) against its module in the module cache, with the
// webhook Secret filled.
func Render(ctx context.Context, c *cluster.Cluster, o Operator) ([]byte, error) {
	module, err := o.ModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(c.Dir(), "overlay-"+o.Name+"-")
	if err != nil {
		return nil, err
	}
	// kustomize refuses absolute resource paths outside the overlay:
	// name the module relative to it.
	rel, err := filepath.Rel(dir, module)
	if err != nil {
		return nil, err
	}
	subst := strings.NewReplacer("{{module}}", filepath.ToSlash(rel), "{{image}}", images.Registry+"/"+o.Name,
		"{{tag}}", o.Version, "{{python}}", images.PythonRef)
	root := path.Join("overlays", o.Name)
	files, err := fs.ReadDir(overlays, root)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := overlays.ReadFile(path.Join(root, f.Name()))
		if err != nil {
			return nil, err
		}
		if f.Name() == "kustomization.yaml" {
			b = []byte(subst.Replace(string(b)))
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name()), b, 0o644); err != nil {
			return nil, err
		}
	}
	cmd := exec.CommandContext(ctx, cluster.Kubectl(), "kustomize", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w: %s", dir, err, stderr.String())
	}
	return fillSecret(out, o)
}

// fillSecret sets the data of the operator's webhook Secret in the
// rendered manifests.
func fillSecret(manifests []byte, o Operator) ([]byte, error) {
	data, err := o.Webhook.SecretData()
	if err != nil {
		return nil, err
	}
	docs, err := cluster.DecodeManifests(manifests)
	if err != nil {
		return nil, err
	}
	found := false
	for _, obj := range docs {
		if obj.GetKind() == "Secret" && obj.GetName() == o.Webhook.Secret {
			found = true
			enc := map[string]any{}
			for k, v := range data {
				enc[k] = v // []byte marshals as base64, as a Secret's data is
			}
			obj.Object["data"] = enc
		}
	}
	if !found {
		return nil, fmt.Errorf("the rendered manifests have no Secret %s", o.Webhook.Secret)
	}
	return cluster.EncodeManifests(docs)
}

// waitAvailable waits until the operator's Deployment is Available: its
// readiness probe passes once its certificates are in place and its
// webhook serves.
func waitAvailable(ctx context.Context, c *cluster.Cluster, o Operator, timeout time.Duration) error {
	var last *appsv1.Deployment
	err := poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		d, err := c.Client().AppsV1().Deployments(o.Namespace).Get(ctx, o.Deployment, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = d
		for _, cond := range d.Status.Conditions {
			if cond.Type == appsv1.DeploymentAvailable {
				return cond.Status == corev1.ConditionTrue && d.Status.ReadyReplicas > 0, nil
			}
		}
		return false, nil
	})
	if err != nil {
		status := ""
		if last != nil {
			status = fmt.Sprintf("%+v", last.Status.Conditions)
		}
		return fmt.Errorf("deployment %s/%s not Available: %w (%s; pods: %s)", o.Namespace, o.Deployment, err, status,
			c.PodsSummary(ctx, o.Namespace, ""))
	}
	return nil
}
