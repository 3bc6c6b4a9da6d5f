// Command webhook serves istio-aux's pod admission webhook: knative.dev/pkg's
// sharedmain runs the reconciler of its MutatingWebhookConfiguration and
// knative's certificates controller that fills the serving Secret, and the
// webhook's own Server answers the API server. Env: SYSTEM_NAMESPACE,
// WEBHOOK_NAME, WEBHOOK_PORT, WEBHOOK_SECRET_NAME, KUBECONFIG,
// ISTIO_AUX_DISABLE_HEALTH_PROBES.
package main

import (
	"strconv"

	"knative.dev/pkg/injection/sharedmain"
	"knative.dev/pkg/logging"
	knwebhook "knative.dev/pkg/webhook"
	"knative.dev/pkg/webhook/certificates"

	"github.com/istio-aux/istio-aux/internal/env"
	"github.com/istio-aux/istio-aux/internal/startup"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/webhook"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

func main() {
	ctx := knwebhook.WithOptions(startup.Context(0), knwebhook.Options{
		ServiceName: knwebhook.NameFromEnv(),
		Port:        knwebhook.PortFromEnv(admission.Port),
		SecretName:  knwebhook.SecretNameFromEnv(names.WebhookSecret),
	})
	// Local runs next to other processes: knative's probe server has a fixed port.
	if off, _ := strconv.ParseBool(env.DisableHealthProbes.Get()); off {
		ctx = sharedmain.WithHealthProbesDisabled(ctx)
	}
	srv := webhook.NewServer()
	// sharedmain builds its logger and flushes it itself; it returns once
	// the context has ended and its controllers have stopped, and the
	// server then finishes draining.
	sharedmain.MainWithContext(webhook.WithServer(ctx, srv), "istio-aux-webhook",
		certificates.NewController,
		webhook.NewController,
	)
	// sharedmain's logger stays inside it: the last line, if any, goes
	// through knative's fallback logger.
	startup.Exit(logging.FromContext(ctx), "istio-aux-webhook stopped", srv.Wait())
}
