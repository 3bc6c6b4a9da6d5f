// Command local is the demo behind `make run`. Without a configured cluster
// (no KUBECONFIG, no ~/.kube/config) it starts a local control plane with
// kwok and Istio's real sidecar injector (istiod, out of cluster), runs
// istio-aux (webhook and bridge), submits the reference demo's 2-worker
// training Job to an opted-in namespace, prints the pod timeline until the
// Job completes, and stays up until Ctrl-C. With a kubeconfig it runs the bridge alone against that
// cluster (the webhook needs in-cluster networking there).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if kc := configuredKubeconfig(); kc != "" {
		err = bridgeOnly(ctx, kc)
	} else {
		err = demo(ctx)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(1)
	}
}

func configuredKubeconfig() string {
	if kc := os.Getenv("KUBECONFIG"); kc != "" {
		return kc
	}
	if home, err := os.UserHomeDir(); err == nil {
		if kc := filepath.Join(home, ".kube", "config"); fileExists(kc) {
			return kc
		}
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// bridgeOnly runs the bridge (embedded NATS, in-process function) in the
// foreground against an existing cluster.
func bridgeOnly(ctx context.Context, kubeconfig string) error {
	bin := os.Getenv("ISTIO_AUX_BRIDGE")
	if bin == "" {
		return errors.New("ISTIO_AUX_BRIDGE (the all-in-one binary, bridge/cmd/allinone) is not set; use hack/run.sh")
	}
	fmt.Fprintf(os.Stderr, "kubeconfig %s: running the bridge alone (the webhook needs in-cluster networking; install it with ko apply -f config/)\n", kubeconfig)
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	return cmd.Run()
}
