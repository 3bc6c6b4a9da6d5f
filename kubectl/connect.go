package kubectl

import (
	"fmt"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Clients are what the commands read the cluster with.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Namespace is the one the kubeconfig's context or -n selects.
	Namespace string
}

// Connector makes Clients from the standard kubectl flags, as a
// clientcmd.ClientConfig (Connect; tests hand in fakes).
type Connector func(clientcmd.ClientConfig) (Clients, error)

// requestTimeout bounds each request when --request-timeout does not: a
// plugin a script runs must not hang on an API server that does not answer.
const requestTimeout = 30 * time.Second

// Connect is the Connector for a real cluster.
func Connect(cc clientcmd.ClientConfig) (Clients, error) {
	rc, err := cc.ClientConfig()
	if err != nil {
		return Clients{}, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if rc.Timeout == 0 {
		rc.Timeout = requestTimeout
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return Clients{}, fmt.Errorf("reading the namespace: %w", err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return Clients{}, fmt.Errorf("making a client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return Clients{}, fmt.Errorf("making a dynamic client: %w", err)
	}
	return Clients{Kube: kube, Dynamic: dyn, Namespace: ns}, nil
}
