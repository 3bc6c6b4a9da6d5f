// Command webhook serves istio-aux's pod admission webhook (knative.dev/pkg
// sharedmain): the mutation, the reconciler of its
// MutatingWebhookConfiguration, and knative's certificates controller that
// fills the serving Secret. Env: SYSTEM_NAMESPACE, WEBHOOK_NAME, WEBHOOK_PORT,
// WEBHOOK_SECRET_NAME, KUBECONFIG, ISTIO_AUX_DISABLE_HEALTH_PROBES.
package main

import (
	"os"
	"strconv"

	"knative.dev/pkg/injection/sharedmain"
	"knative.dev/pkg/signals"
	knwebhook "knative.dev/pkg/webhook"
	"knative.dev/pkg/webhook/certificates"

	"github.com/istio-aux/istio-aux/webhook"
)

func main() {
	ctx := knwebhook.WithOptions(signals.NewContext(), knwebhook.Options{
		ServiceName: knwebhook.NameFromEnv(),
		Port:        knwebhook.PortFromEnv(webhook.Port),
		SecretName:  knwebhook.SecretNameFromEnv(webhook.SecretName),
	})
	// Local runs next to other processes: knative's probe server has a fixed port.
	if off, _ := strconv.ParseBool(os.Getenv("ISTIO_AUX_DISABLE_HEALTH_PROBES")); off {
		ctx = sharedmain.WithHealthProbesDisabled(ctx)
	}
	sharedmain.WebhookMainWithContext(ctx, "istio-aux-webhook",
		certificates.NewController,
		webhook.NewController,
	)
}
