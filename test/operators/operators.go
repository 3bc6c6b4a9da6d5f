// Package operators installs, on the real node's whole cluster
// (test/realnode), the operators whose pods users run through istio-aux:
// the Kubeflow training operator v1 (TFJob, PyTorchJob), and Kubeflow
// Trainer v2 (TrainJob) with JobSet. Each is built from the Go module
// proxy (hack/build-operators.sh), pushed to the node's registry as a
// one-layer image, and installed from the manifests and CRDs of its own
// module, read from the Go module cache at run time through one kustomize
// overlay each (overlays/), as `kubectl apply --server-side -k` would.
package operators

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
)

// The versions hack/tools/{training-operator,trainer} require, which
// hack/build-operators.sh builds and caches under; TestVersionsMatchTools
// keeps them equal.
const (
	TrainingOperatorVersion = "v1.9.4"
	TrainerVersion          = "v2.3.0"
	JobSetVersion           = "v0.12.0"
)

// Operator is one operator as installed here.
type Operator struct {
	// Name is the overlay's folder (overlays/<Name>) and the image's
	// repository.
	Name string
	// Tool is the tools module under hack/tools that pins Module.
	Tool    string
	Module  string
	Version string
	// Binary is the cached build, under <cache>/<Name>-<Version>/bin.
	Binary string
	// User runs the image (upstream's manifests ask for runAsNonRoot).
	User string
	// Namespace and Deployment are where it runs.
	Namespace  string
	Deployment string
	// Webhook is its certificate rotator's Secret, CA name and serving
	// name (OPA cert-controller, in all three).
	Webhook WebhookCert
}

// The operators, in the order they must be installed (Trainer needs
// JobSet's CRD at start).
var (
	TrainingOperator = Operator{
		Name: "training-operator", Tool: "training-operator",
		Module: "github.com/kubeflow/training-operator", Version: TrainingOperatorVersion,
		Binary: "training-operator", Namespace: "kubeflow", Deployment: "training-operator",
		Webhook: WebhookCert{Secret: "training-operator-webhook-cert", CAName: "training-operator-ca",
			DNSName: "training-operator.kubeflow.svc"},
	}
	JobSet = Operator{
		Name: "jobset", Tool: "trainer", Module: "sigs.k8s.io/jobset", Version: JobSetVersion,
		Binary: "jobset", User: "65532", Namespace: "jobset-system", Deployment: "jobset-controller-manager",
		Webhook: WebhookCert{Secret: "jobset-webhook-server-cert", CAName: "jobset-ca",
			DNSName: "jobset-webhook-service.jobset-system.svc"},
	}
	Trainer = Operator{
		Name: "trainer", Tool: "trainer", Module: "github.com/kubeflow/trainer/v2", Version: TrainerVersion,
		Binary: "trainer-controller-manager", User: "65532", Namespace: "kubeflow-system",
		Deployment: "kubeflow-trainer-controller-manager",
		Webhook: WebhookCert{Secret: "kubeflow-trainer-webhook-cert", CAName: "kubeflow-trainer-ca",
			DNSName: "kubeflow-trainer-controller-manager.kubeflow-system.svc"},
	}
)

// Bin is the operator's cached build (hack/build-operators.sh).
func (o Operator) Bin() string {
	return filepath.Join(cluster.CacheDir(), o.Name+"-"+o.Version, "bin", o.Binary)
}

// ImageRef is the operator's image as its Deployment names it.
func (o Operator) ImageRef() string { return images.Registry + "/" + o.Name + ":" + o.Version }

// Image is the operator's image: the binary at /manager (where upstream's
// Deployments run it), as the entrypoint.
func (o Operator) Image() images.Image {
	return images.Image{
		Ref:        o.ImageRef(),
		Files:      []images.File{{Path: "/manager", Mode: 0o755, Src: o.Bin()}},
		Entrypoint: []string{"/manager"},
		User:       o.User,
	}
}

// Built says which operator binaries are missing, or nil.
func Built(ops ...Operator) error {
	var missing []string
	for _, o := range ops {
		if _, err := os.Stat(o.Bin()); err != nil {
			missing = append(missing, o.Bin())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s missing (run hack/build-operators.sh)", strings.Join(missing, ", "))
	}
	return nil
}

// ModuleDir is where the Go module cache holds the operator's module, from
// which its manifests and CRDs are read. The build put it there; nothing
// is downloaded here (GOPROXY=off: the node's network namespace has no
// way out).
func (o Operator) ModuleDir(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", o.Module)
	cmd.Dir = filepath.Join(cluster.RepoRoot(), "hack", "tools", o.Tool)
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		return "", fmt.Errorf("module %s in hack/tools/%s: %w %s (run hack/build-operators.sh)", o.Module, o.Tool, err, stderr)
	}
	return dir, nil
}
