// Command fullinformer is the memory reference for test/bench: a plain
// client-go informer caching every pod in full, cluster-wide, as the
// reference implementation's controller-runtime cache does. It writes the
// number of cached pods to $READY_FILE once synced and runs until SIGTERM.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Getenv("KUBECONFIG"), os.Getenv("READY_FILE"))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fullinformer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, readyFile string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	pods := f.Core().V1().Pods().Informer()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		return fmt.Errorf("pod informer did not sync")
	}
	if readyFile != "" {
		n := len(pods.GetStore().ListKeys())
		if err := os.WriteFile(readyFile, []byte(fmt.Sprint(n)), 0o644); err != nil {
			return err
		}
	}
	<-ctx.Done()
	f.Shutdown()
	return nil
}
