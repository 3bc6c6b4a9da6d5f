package explain

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/istio-aux/istio-aux/kubectl/install"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// notMutated is the likely reason the webhook, which would add the hold
// now, did not when the pod was created: most specific first. A webhook
// that was down or slow is blamed only where the live failurePolicy is
// Ignore: under Fail, a call that fails refuses the pod, so a pod let in
// without the hold was not sent to the webhook at all, or was while
// failurePolicy was Ignore (the webhook's reconciler writes Fail back
// whenever it runs, so the live policy does not say what it was then).
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
	managed := "kubectl get mutatingwebhookconfiguration " + names.WebhookConfiguration + " --show-managed-fields -o yaml"
	switch {
	case !w.Read:
		return CauseWebhookNotCalled, fmt.Sprintf("the webhook would add it now, so when the pod was created (%s) the API server did not call it, "+
			"or let the pod in without its answer, which only failurePolicy Ignore does (the webhook's state could not be read to say more)",
			stamp(created)), []string{logs}
	case w.Configuration == nil:
		return CauseWebhookMissing, fmt.Sprintf("MutatingWebhookConfiguration %s is missing: the API server calls no istio-aux webhook",
			names.WebhookConfiguration), []string{"kubectl get mutatingwebhookconfiguration " + names.WebhookConfiguration}
	case w.Configuration.CreationTimestamp.After(created):
		return CauseWebhookMissing, fmt.Sprintf("MutatingWebhookConfiguration %s was created at %s, after the pod (%s): istio-aux was "+
			"likely installed, or its configuration re-created, since. Pods created since get the hold; re-create this one",
			names.WebhookConfiguration, stamp(w.Configuration.CreationTimestamp.Time), stamp(created)), nil
	}
	ignoring := e.ignoring()
	if len(ignoring) == 0 {
		return CauseWebhookNotCalled, fmt.Sprintf("the webhook would add it now, yet the pod was let in without it at %s. With failurePolicy Fail, "+
			"as now, a call that fails refuses the pod: the API server did not call the webhook (its configuration did not match the pod then), "+
			"or failurePolicy was Ignore at the time (the webhook's reconciler sets Fail back whenever it runs)", stamp(created)), []string{managed}
	}
	policy := fmt.Sprintf("failurePolicy Ignore (webhook %s)", strings.Join(ignoring, ", "))
	switch {
	case w.Endpoints.Ready == 0:
		return CauseWebhookDown, fmt.Sprintf("Service %s/%s has no ready endpoint: the webhook is down, and with %s "+
				"the API server admits opted-in pods unchanged", sys, names.WebhookService, policy),
			[]string{fmt.Sprintf("kubectl -n %s get endpointslices -l %s=%s", sys, discoveryv1.LabelServiceName, names.WebhookService),
				fmt.Sprintf("kubectl -n %s get pods -l %s=%s", sys, names.ComponentLabel, names.ComponentWebhook), managed}
	case w.Since.After(created):
		return CauseWebhookDown, fmt.Sprintf("the webhook's oldest running pod started at %s, after the pod was created at %s: "+
			"it was likely down or starting then, and with %s the API server admits pods unchanged", stamp(w.Since), stamp(created), policy), []string{managed}
	}
	return CauseWebhookNotCalled, fmt.Sprintf("the webhook would add it now, so when the pod was created (%s) it was not called or did "+
		"not answer within its timeout, and %s let the pod in unchanged", stamp(created), policy), []string{logs, managed}
}

// ignoring names the live webhooks that are called for the pod and let it
// in unchanged when a call fails: failurePolicy Ignore (unset is the API
// server's default, Fail).
func (e *explanation) ignoring() []string {
	var out []string
	for _, w := range e.in.Webhook.Configuration.Webhooks {
		if install.FailsOpen(w) && matches(w.NamespaceSelector, e.nsLabels) && matches(w.ObjectSelector, e.in.Pod.Labels) {
			out = append(out, w.Name)
		}
	}
	return out
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
