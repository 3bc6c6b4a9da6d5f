package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeName is the one fake node kwok manages; every pod is bound to it.
const NodeName = "kwok-node-0"

// nodeAnnotation selects the nodes kwok manages (only ours).
const nodeAnnotation = "kwok.x-k8s.io/node"

// StubDir holds the stub pilot-agent (built on first use) that kwok's exec
// runs; it is put first on kwok's PATH.
func StubDir() string { return filepath.Join(CacheDir(), "stub", "bin") }

func (c *Cluster) startKwok(ctx context.Context) error {
	kwokBin := filepath.Join(KwokDir(), "bin", "kwok")
	if _, err := os.Stat(kwokBin); err != nil {
		return fmt.Errorf("kwok missing (run hack/build-kwok.sh): %w", err)
	}
	if err := EnsureBuilt(ctx, filepath.Join(StubDir(), "pilot-agent"), "./test/cmd/pilot-agent"); err != nil {
		return err
	}
	manifests := filepath.Join(KwokDir(), "manifests")
	if err := c.Kubectl(ctx, "apply", "--server-side", "-f", manifests); err != nil {
		// The Stage in that directory needs its CRD established first.
		if err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=30s",
			"crd/stages.kwok.x-k8s.io", "crd/execs.kwok.x-k8s.io", "crd/clusterexecs.kwok.x-k8s.io"); err != nil {
			return err
		}
		if err := c.Kubectl(ctx, "apply", "--server-side", "-f", manifests); err != nil {
			return err
		}
	}
	if err := c.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(RepoRoot(), "test", "kwok")); err != nil {
		return err
	}

	cert, key, err := c.ca.Serving(NodeName)
	if err != nil {
		return err
	}
	// An empty config keeps kwok away from ~/.kwok.
	for name, data := range map[string][]byte{"kwok.crt": cert, "kwok.key": key, "kwok.yaml": nil} {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			return err
		}
	}
	c.quits = c.path("pilot-agent-quits.jsonl")
	port, err := FreePort()
	if err != nil {
		return err
	}
	env := []string{
		"PATH=" + StubDir() + string(os.PathListSeparator) + os.Getenv("PATH"),
		// For the stub pilot-agent kwok runs on exec.
		"KUBECONFIG=" + c.kubeconfig,
		EnvQuitRecord + "=" + c.quits,
		"HOME=" + c.dir,
	}
	p, err := c.StartProcess("kwok", env, kwokBin,
		"--kubeconfig="+c.kubeconfig,
		"--config="+c.path("kwok.yaml"),
		"--enable-crds=Stage,Exec,ClusterExec",
		"--manage-nodes-with-annotation-selector="+nodeAnnotation+"=fake",
		"--node-ip=127.0.0.1",
		fmt.Sprintf("--node-port=%d", port),
		fmt.Sprintf("--server-address=127.0.0.1:%d", port),
		"--tls-cert-file="+c.path("kwok.crt"), "--tls-private-key-file="+c.path("kwok.key"),
	)
	if err != nil {
		return err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        NodeName,
		Annotations: map[string]string{nodeAnnotation: "fake"},
		Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": NodeName},
	}}
	if _, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating fake node: %w", err)
	}
	if err := p.WaitUp(ctx, 60*time.Second, func(ctx context.Context) error {
		return c.NodeReady(ctx, NodeName)
	}); err != nil {
		return err
	}
	hctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	return c.startPodHelpers(hctx)
}

// EnsureBuilt builds pkg, a package of this module ("./test/cmd/…"), into
// bin unless bin is there; env is added to go's environment.
func EnsureBuilt(ctx context.Context, bin, pkg string, env ...string) error {
	if _, err := os.Stat(bin); err == nil {
		return nil
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w: %s", pkg, err, out)
	}
	return nil
}
