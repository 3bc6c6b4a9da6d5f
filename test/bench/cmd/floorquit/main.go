// Command floorquit is the completion benchmark's floor quitter
// (test/bench/quitter.Floor) as a process of its own, so that its CPU can
// be read beside istio-aux's, on the pods of $NAMESPACE. It writes "ready"
// to $READY_FILE once watching and runs until SIGTERM, then prints how
// many execs it retried.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/test/bench/quitter"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Getenv("KUBECONFIG"), os.Getenv("NAMESPACE"), os.Getenv("READY_FILE"))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "floorquit:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, ns, readyFile string) error {
	if ns == "" {
		return fmt.Errorf("NAMESPACE is empty: the floor quits the pods of one namespace")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// Protobuf, as istio-aux's own client reads pods: the floor is the
	// least a watcher spends, and JSON would cost it more.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ex, err := proxyquit.NewRemoteExecer(cfg)
	if err != nil {
		return err
	}
	stopFloor, errs, err := quitter.Floor(ctx, cs, ex, ns)
	if err != nil {
		return err
	}
	if readyFile != "" {
		if err := os.WriteFile(readyFile, []byte("ready"), 0o644); err != nil {
			stopFloor()
			return err
		}
	}
	<-ctx.Done()
	stopFloor()
	fmt.Fprintf(os.Stderr, "floorquit: %d execs retried\n", errs.Load())
	return nil
}
