// Command natstoken is the init container that hands istio-aux's NATS
// credential around (config/nats):
//
//	natstoken             in the NATS pod: make sure Secret $NATS_SECRET
//	                      (istio-aux-nats) in $SYSTEM_NAMESPACE holds a
//	                      token, generating one on the first start
//	natstoken --copy DIR  in the bridge's and the dispatchers' pods: wait
//	                      until that Secret has data (or find it absent:
//	                      no credentials), then make DIR a copy of its keys
//	                      (again over an earlier copy: the kubelet reruns
//	                      init containers over the emptyDir it kept)
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/istio-aux/istio-aux/bridge/natstoken"
	"github.com/istio-aux/istio-aux/internal/env"
	"github.com/istio-aux/istio-aux/internal/kube"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	copyTo := flag.String("copy", "", "write the Secret's keys into this directory once it has data")
	flag.Parse()
	// The NATS pod fills the Secret within seconds of starting; a pod that
	// waits longer restarts its init container (with the kubelet's back-off)
	// and says why.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	logger, _ := zap.NewProduction()
	namespace, name := env.SystemNamespace.Get(), env.NATSSecret.Get()
	rc, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig.Get()) // empty: in-cluster
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
	secrets := natstoken.RESTSecrets(kc.RESTClient(), namespace)
	if *copyTo != "" {
		n, err := natstoken.Copy(ctx, secrets, name, *copyTo, time.Second)
		if err != nil {
			logger.Fatal("Copying the NATS credentials", zap.Error(err))
		}
		logger.Info("The NATS credentials are in place", zap.String("secret", namespace+"/"+name), zap.Int("keys", n))
		return
	}
	did, err := natstoken.Ensure(ctx, secrets, name)
	if err != nil {
		logger.Fatal("Filling the NATS token", zap.Error(err))
	}
	if did == natstoken.Replaced {
		logger.Warn("The Secret's NATS token was one nats-server cannot read; replaced it. "+
			"Restart the pods that copied the old one: kubectl -n "+namespace+" rollout restart deployment -l app.kubernetes.io/name=istio-aux",
			zap.String("secret", namespace+"/"+name))
		return
	}
	logger.Info("The NATS token is in place", zap.String("secret", namespace+"/"+name), zap.Bool("generated", did == natstoken.Generated))
}
