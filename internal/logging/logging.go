// Package logging gives the bridge and the proxy-quit function the logging
// knative.dev/pkg's sharedmain gives the webhook: zap configured by the
// config-logging ConfigMap of the system namespace (zap-logger-config for
// the format, loglevel.<component> for each component's level), with level
// changes applied while the process runs. So one ConfigMap sets the level of
// all three components (config/300-config-logging.yaml).
package logging

import (
	"context"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	knlogging "knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/internal/env"
	"github.com/istio-aux/istio-aux/internal/kube"
)

// New returns component's logger and keeps its level current until ctx is
// done. Without a system namespace or a client configuration (a local
// run), or when the ConfigMap cannot be read, it logs at info in
// knative.dev/pkg's default format, and says why when it could not read.
func New(ctx context.Context, rc *rest.Config, component string) *zap.SugaredLogger {
	defaults, _ := knlogging.NewConfigFromMap(nil) // cannot fail on no data
	namespace := env.SystemNamespace.Get()         // config-logging's, as for the webhook (knative.dev/pkg/system)
	if namespace == "" || rc == nil {
		logger, _ := knlogging.NewLoggerFromConfig(defaults, component)
		return logger
	}
	client, err := kube.NewForConfig(rc)
	if err != nil {
		logger, _ := knlogging.NewLoggerFromConfig(defaults, component)
		logger.Warnw("Logging at the default level: no client for config-logging", zap.Error(err))
		return logger
	}
	name := knlogging.ConfigMapName()
	cm, err := client.ConfigMap(ctx, namespace, name)
	cfg := defaults
	if err == nil {
		if cfg, err = knlogging.NewConfigFromConfigMap(cm); err != nil {
			cfg = defaults
		}
	}
	logger, level := knlogging.NewLoggerFromConfig(cfg, component)
	if err != nil && !apierrors.IsNotFound(err) {
		logger.Warnw("Logging at the default level: config-logging is unreadable", zap.String("namespace", namespace), zap.Error(err))
	}
	update := knlogging.UpdateLevelFromConfigMap(logger, level, component)
	client.FollowConfigMap(ctx, namespace, name, func(cm *corev1.ConfigMap) {
		if cm != nil { // deleted: the level stays
			update(cm)
		}
	})
	return logger
}
