package istio

// WebhookConfigurationName is the MutatingWebhookConfiguration the chart
// creates for the default revision installed in istio-system; a revision's
// is this with "-REVISION" appended, a revision tag's
// TagWebhookConfigurationName. The API server calls mutating webhooks
// sorted by configuration name, so istio-aux's webhook must sort before
// all of them ("istio-revision-tag-" sorts first).
const WebhookConfigurationName = "istio-sidecar-injector"

// Namespace is where istiod and its ConfigMaps live.
const Namespace = "istio-system"
