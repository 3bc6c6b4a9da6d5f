// Command natstoken is the init container of istio-aux's NATS
// (config/nats): it makes sure Secret $NATS_SECRET (istio-aux-nats) in
// $SYSTEM_NAMESPACE holds a token, generating one on the first start.
package main

import (
	"cmp"
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/istio-aux/istio-aux/bridge/natstoken"
	"github.com/istio-aux/istio-aux/internal/kube"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	logger, _ := zap.NewProduction()
	namespace, name := os.Getenv("SYSTEM_NAMESPACE"), cmp.Or(os.Getenv("NATS_SECRET"), "istio-aux-nats")
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG")) // empty: in-cluster
	if namespace == "" {
		err = errors.Join(err, errors.New("SYSTEM_NAMESPACE is not set"))
	}
	if err != nil {
		logger.Fatal("Invalid configuration", zap.Error(err))
	}
	kc, err := kube.NewForConfig(rc)
	if err != nil {
		logger.Fatal("Creating the Kubernetes client", zap.Error(err))
	}
	generated, err := natstoken.Ensure(ctx, natstoken.RESTSecrets(kc.RESTClient(), namespace), name)
	if err != nil {
		logger.Fatal("Filling the NATS token", zap.Error(err))
	}
	logger.Info("The NATS token is in place", zap.String("secret", namespace+"/"+name), zap.Bool("generated", generated))
}
