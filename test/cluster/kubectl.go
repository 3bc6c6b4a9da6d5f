package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Kubectl runs the cached kubectl against the cluster; its output goes to
// the cluster log and, on failure, into the error.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) error {
	return c.kubectlIn(ctx, nil, args...)
}

// Apply applies manifests (YAML, several documents) with kubectl apply
// --server-side, as the cluster's admin.
func (c *Cluster) Apply(ctx context.Context, manifests []byte) error {
	return c.kubectlIn(ctx, manifests, "apply", "--server-side", "--field-manager=istio-aux-harness", "-f", "-")
}

// ApplyPlain applies manifests as a user applies a release: plain
// `kubectl apply -f` (client-side, the last-applied annotation).
func (c *Cluster) ApplyPlain(ctx context.Context, manifests []byte) error {
	return c.kubectlIn(ctx, manifests, "apply", "-f", "-")
}

// Delete deletes what manifests name and waits until it is gone.
func (c *Cluster) Delete(ctx context.Context, manifests []byte) error {
	return c.kubectlIn(ctx, manifests, "delete", "--ignore-not-found", "--wait", "-f", "-")
}

// kubectlIn runs kubectl with stdin; its output goes to the cluster log
// and, on failure, into the error.
func (c *Cluster) kubectlIn(ctx context.Context, stdin []byte, args ...string) error {
	cmd := exec.CommandContext(ctx, Kubectl(), append([]string{"--kubeconfig=" + c.kubeconfig}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	fmt.Fprintf(logFor(c.opts.Log), "kubectl %s| %s\n", args[0], strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
