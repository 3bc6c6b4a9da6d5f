package explain

import (
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// notMutated is the likely reason the webhook, which would add the hold
// now, did not when the pod was created: most specific first.
func (e *explanation) notMutated() (cause, text string, checks []string) {
	p, w, sys := e.in.Pod, e.in.Webhook, e.in.SystemNamespace
	created := p.CreationTimestamp.Time
	logs := fmt.Sprintf("kubectl -n %s logs -l %s=%s --tail=200", sys, names.ComponentLabel, names.ComponentWebhook)
	if !e.out.OptIn.Webhook {
		fix := fmt.Sprintf("kubectl label pod -n %s %s %s=true", p.Namespace, p.Name, keys.LabelEnabled)
		return CauseNotReached, fmt.Sprintf("opted in by the %s, which the webhook's selectors cannot see: they read labels only "+
			"(label the pod %s=true, exactly, and re-create it)", sourceWords(e.opt.Source), keys.LabelEnabled), []string{fix}
	}
	if key := namespaceKey(e.opt.Source); key != "" {
		if at, ok := labelSetAt(e.in.Namespace, key); ok && at.After(created) {
			return CauseCreatedBeforeOptIn, fmt.Sprintf("it was likely created before namespace %s opted in: label %s was last set at %s, "+
				"the pod created at %s. Pods created since get the hold; re-create this one", p.Namespace, key, stamp(at), stamp(created)), nil
		}
	}
	switch {
	case !w.Read:
		return CauseWebhookNotCalled, fmt.Sprintf("the webhook would add it now, so when the pod was created (%s) it was not called "+
			"or did not answer (the webhook's state could not be read to say more)", stamp(created)), []string{logs}
	case w.Configuration == nil:
		return CauseWebhookMissing, fmt.Sprintf("MutatingWebhookConfiguration %s is missing: the API server calls no istio-aux webhook",
			names.WebhookConfiguration), []string{"kubectl get mutatingwebhookconfiguration " + names.WebhookConfiguration}
	case w.Endpoints.Ready == 0:
		return CauseWebhookDown, fmt.Sprintf("Service %s/%s has no ready endpoint: the webhook is down, and with failurePolicy Ignore "+
				"the API server admits pods unchanged", sys, names.WebhookService),
			[]string{fmt.Sprintf("kubectl -n %s get endpointslices -l %s=%s", sys, discoveryv1.LabelServiceName, names.WebhookService),
				fmt.Sprintf("kubectl -n %s get pods -l %s=%s", sys, names.ComponentLabel, names.ComponentWebhook)}
	case w.Since.After(created):
		return CauseWebhookDown, fmt.Sprintf("the webhook's oldest running pod started at %s, after the pod was created at %s: "+
			"it was likely down or starting then, and with failurePolicy Ignore the API server admits pods unchanged", stamp(w.Since), stamp(created)), nil
	}
	return CauseWebhookNotCalled, fmt.Sprintf("the webhook would add it now, so when the pod was created (%s) it was not called or did "+
		"not answer within its timeout, and failurePolicy Ignore let the pod in unchanged", stamp(created)), []string{logs}
}

// namespaceKey is the namespace label behind a namespace opt-in, "" for
// the others.
func namespaceKey(s decision.OptInSource) string {
	switch s {
	case decision.SourceNamespaceLabel:
		return keys.LabelEnabled
	case decision.SourceLegacyNamespaceLabel:
		return keys.LegacyLabel
	}
	return ""
}

// labelSetAt is when a manager last wrote the namespace's label key, from
// its managedFields: each entry names the fields its manager owns and when
// it last changed them (a manager that changed others since makes the time
// later, never earlier, so "set after the pod" stays a likely cause).
func labelSetAt(ns *corev1.Namespace, key string) (time.Time, bool) {
	if ns == nil {
		return time.Time{}, false
	}
	var latest time.Time
	for _, m := range ns.ManagedFields {
		if m.FieldsV1 == nil || m.Time == nil {
			continue
		}
		var fields struct {
			Metadata struct {
				Labels map[string]json.RawMessage `json:"f:labels"`
			} `json:"f:metadata"`
		}
		if json.Unmarshal(m.FieldsV1.Raw, &fields) != nil {
			continue
		}
		if _, ok := fields.Metadata.Labels["f:"+key]; ok && m.Time.After(latest) {
			latest = m.Time.Time
		}
	}
	return latest, !latest.IsZero()
}

// stamp is a time as the report prints it.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
