// Command local is the demo behind `make run`. Without a configured cluster
// (no KUBECONFIG, no ~/.kube/config) it starts the whole local stack
// (test/mesh): the control plane, a node — a real kubelet with containerd
// in a network namespace of its own where the machine can host one, else
// kwok's simulation, and it says which and why —, istiod as the injector
// and istio-aux. On the real node it then tells the seed's story with its
// TFJob and the Kubeflow training operator (tfjob.go): stuck without
// istio-aux, Succeeded once the namespace is opted in; on kwok it submits
// the TFJob's pods as a 2-worker Job to an opted-in namespace. It prints
// the pod timeline until the job is done, and
// stays up until Ctrl-C, when it stops everything it started. With a
// kubeconfig it runs istio-aux's all-in-one bridge alone against that
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

	"github.com/istio-aux/istio-aux/test/realnode"
)

func main() {
	// `make run | tee run.log` and Ctrl-C: tee is gone at once, and a
	// write to its pipe would kill this process with SIGPIPE halfway
	// through stopping the cluster (pods, shims and mounts left behind).
	// Ignored, the write fails instead and the cleanup goes on.
	signal.Ignore(syscall.SIGPIPE)
	if kc := configuredKubeconfig(); kc != "" {
		exit(bridgeOnly(kc))
	}
	os.Exit(realnode.RunInNetns(func() int { exit(demo()); return 0 }))
}

func exit(err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(1)
	}
	os.Exit(0)
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

// bridgeOnly runs the all-in-one bridge (embedded NATS, in-process
// function) in the foreground against an existing cluster.
func bridgeOnly(kubeconfig string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bin := os.Getenv("ISTIO_AUX_BRIDGE")
	if bin == "" {
		return errors.New("ISTIO_AUX_BRIDGE (the all-in-one binary, cmd/allinone) is not set; use hack/run.sh")
	}
	fmt.Fprintf(os.Stderr, "kubeconfig %s: running the bridge alone (the webhook needs in-cluster networking; install it with ko apply -f config/)\n", kubeconfig)
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	return cmd.Run()
}
