package explain

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// maxEvents bounds the Events a report lists: the last ones tell the story.
const maxEvents = 5

// istioAuxEvents are the function's Events on pod p (its name and, where
// the Event names one, its UID: a pod re-created under the same name is
// another pod), oldest first, the last maxEvents of them.
//
// The function's are those it reports (fromFunction): anyone who may
// create Events in a namespace can write one with its reasons on a pod
// there, and a tenant's ProxyQuit must not read as istio-aux's quit, nor
// its ProxyQuitFailed as istio-aux's failure. Those are left out, not
// shown apart: the report is istio-aux's record, and quoting them would
// print more of a tenant's words (kubectl get events shows every Event).
func istioAuxEvents(evs []corev1.Event, p *corev1.Pod) []Event {
	out := []Event{}
	for _, ev := range evs {
		o := ev.InvolvedObject
		if ev.Reason != names.ReasonProxyQuit && ev.Reason != names.ReasonProxyQuitFailed || !fromFunction(ev) || o.Kind != "" && o.Kind != "Pod" ||
			o.Name != p.Name || o.Namespace != "" && o.Namespace != p.Namespace || o.UID != "" && p.UID != "" && o.UID != p.UID {
			continue
		}
		out = append(out, Event{Reason: ev.Reason, Type: ev.Type, Message: ev.Message, Time: eventTime(ev), Count: max(ev.Count, 1)})
	}
	slices.SortStableFunc(out, func(a, b Event) int { return a.Time.Compare(b.Time) })
	return out[max(0, len(out)-maxEvents):]
}

// fromFunction reports an Event the proxy-quit function recorded: its
// reporter is names.SourceProxyQuit, which the function writes, as
// client-go's recorder does, as both its reportingController and its
// source.component (the events.k8s.io API calls them reportingController
// and deprecatedSource). Where the two differ the reportingController,
// which the newer API requires, is the reporter; an Event with only a
// source.component (written by a function before it wrote both) is
// judged by that.
func fromFunction(ev corev1.Event) bool {
	return cmp.Or(ev.ReportingController, ev.Source.Component) == names.SourceProxyQuit
}

// eventTime is when an Event last happened, whichever API wrote it.
func eventTime(ev corev1.Event) time.Time {
	t := ev.CreationTimestamp.Time
	for _, c := range []time.Time{ev.FirstTimestamp.Time, ev.LastTimestamp.Time, ev.EventTime.Time} {
		if c.After(t) {
			t = c
		}
	}
	if ev.Series != nil && ev.Series.LastObservedTime.After(t) {
		t = ev.Series.LastObservedTime.Time
	}
	return t.UTC()
}

func (e *explanation) lastEvent() *Event {
	if n := len(e.out.Events); n > 0 {
		return &e.out.Events[n-1]
	}
	return nil
}

func (e *explanation) lastOf(reason string) *Event {
	for i := len(e.out.Events) - 1; i >= 0; i-- {
		if e.out.Events[i].Reason == reason {
			return &e.out.Events[i]
		}
	}
	return nil
}

// events turns a last Event that says the quit failed, while the proxy
// still runs, into a problem with what to check.
func (e *explanation) events() {
	last := e.lastEvent()
	if last == nil || last.Reason != names.ReasonProxyQuitFailed || !e.proxyRunning() {
		return
	}
	what, checks := failureAdvice(last.Message, e.in.Pod, e.in.SystemNamespace)
	e.problem("istio-aux could not quit istio-proxy at "+stamp(last.Time)+": "+what, checks...)
}

// failureAdvice reads a ProxyQuitFailed message (functions/proxyquit's
// words, with the API server's) and says what it means and what to check.
func failureAdvice(msg string, p *corev1.Pod, sys string) (string, []string) {
	cm := fmt.Sprintf("kubectl -n %s get configmap %s -o yaml", sys, names.ConfigMap)
	policies := fmt.Sprintf("kubectl get validatingadmissionpolicy %s %s -o yaml", names.ExecPolicy, names.ExecCommandPolicy)
	bindings := fmt.Sprintf("kubectl get validatingadmissionpolicybinding %s %s %s -o yaml", names.ExecBinding, names.ExecCommandBinding, names.ExecCommandLegacyBinding)
	as := fmt.Sprintf("--as=system:serviceaccount:%s:%s", sys, names.FunctionServiceAccount)
	switch policy := quotedAfter(msg, "ValidatingAdmissionPolicy '"); {
	case strings.Contains(msg, "no params found"):
		return fmt.Sprintf("the exec policy's param, ConfigMap %s/%s, is missing: every quit in opted-in namespaces is denied", sys, names.ConfigMap),
			[]string{cm, bindings}
	case policy == names.ExecCommandPolicy:
		return fmt.Sprintf("the exec policy %s allows only the quit-command of ConfigMap %s/%s as it is now, and the function runs the one it read at start: "+
			"after changing quit-command, roll the function (a new Knative revision)", policy, sys, names.ConfigMap), []string{cm, policies}
	case policy != "" && strings.Contains(msg, "system namespace"):
		return fmt.Sprintf("the exec policy %s never lets istio-aux quit a proxy in a system namespace (%s is one), whatever its labels: "+
			"run the Job in another namespace", policy, p.Namespace), nil
	case policy != "" && strings.Contains(msg, "not opted in"):
		fix := fmt.Sprintf("kubectl label namespace %s %s=%s", p.Namespace, keys.LabelEnabled, keys.LabelEnabledPods)
		return fmt.Sprintf("the exec policy %s refuses namespace %s: it is labelled neither %s=true nor =%s nor %s=%s",
			policy, p.Namespace, keys.LabelEnabled, keys.LabelEnabledPods, keys.LegacyLabel, keys.LegacyLabelValue), []string{fix}
	case policy != "":
		return fmt.Sprintf("the exec policy %s (binding %s) denied the exec: %s", policy, quotedAfter(msg, "with binding '"), afterLast(msg, "denied request: ")),
			[]string{policies, bindings}
	case strings.Contains(msg, "("+names.FinalDenied+")"):
		return "the API server denied the exec (RBAC, or another admission policy)",
			[]string{fmt.Sprintf("kubectl auth can-i create pods/exec -n %s %s", p.Namespace, as), fmt.Sprintf("kubectl auth can-i get pods/exec -n %s %s", p.Namespace, as)}
	case strings.Contains(msg, "("+names.FinalExitCode+")"):
		return "the quit command ran in istio-proxy and exited non-zero: is quit-command right for this proxy?",
			[]string{cm, fmt.Sprintf("kubectl logs -n %s %s -c %s --tail=50", p.Namespace, p.Name, keys.ProxyContainer)}
	case strings.Contains(msg, "("+names.FinalNotFound+")"):
		return fmt.Sprintf("the quit command's program is not in the istio-proxy image: set quit-command in ConfigMap %s/%s for this proxy "+
			"(proxies older than Istio 1.4: curl -sf -XPOST http://127.0.0.1:15020/quitquitquit), then roll the function", sys, names.ConfigMap), []string{cm}
	case strings.Contains(msg, "("+names.FinalRejected+")"):
		return "the API server rejected the exec request for this pod", []string{fmt.Sprintf("kubectl describe pod -n %s %s", p.Namespace, p.Name)}
	case strings.Contains(msg, "will retry"):
		return "a failure that may pass (the API server, the node, a timeout); istio-aux retries with back-off", []string{"kubectl istio-aux check"}
	}
	return msg, nil
}

// quotedAfter is the text between prefix and the next single quote.
func quotedAfter(s, prefix string) string {
	_, rest, ok := strings.Cut(s, prefix)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, "'")
	return v
}

// afterLast is what follows the last sep in s, or s.
func afterLast(s, sep string) string {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[i+len(sep):]
	}
	return s
}
