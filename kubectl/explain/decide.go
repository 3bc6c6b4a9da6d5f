package explain

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// staleAfter is how long after its last app finished a pod whose decision
// is Quit may keep its proxy before explain calls it a problem: a healthy
// istio-aux quits within seconds.
const staleAfter = time.Minute

// decide is pkg/decision's answer on the pod now, as the function would
// reach it: a pod outside the opt-in is not decided on at all.
func (e *explanation) decide() {
	if e.opt.OptedIn {
		e.d = decision.Decide(e.pod, e.in.Config.Decision)
	} else {
		e.d = decision.Decision{Outcome: decision.Ignore, Reason: ReasonNotOptedIn}
	}
	e.out.Decision = Decision{Outcome: e.d.Outcome.String(), Reason: e.d.Reason, Text: e.d.Outcome.String() + ": " + e.reasonWords()}
}

// reasonWords is the decision's reason for a reader.
func (e *explanation) reasonWords() string {
	switch e.d.Reason {
	case decision.ReasonAppsDone:
		return "every app has terminated and the kubelet will run none of them again"
	case decision.ReasonAppsRunning:
		return "an app has not terminated yet"
	case decision.ReasonAppWillRestart:
		return "the kubelet will run an app again"
	case decision.ReasonRestartAll:
		return "a restart rule will restart every container, istio-proxy included"
	case decision.ReasonNoProxy:
		return "the pod has no classic istio-proxy container"
	case decision.ReasonNativeSidecar:
		return "istio-proxy is a native sidecar, which the kubelet stops after the apps (quit-native is off)"
	case decision.ReasonDeleting:
		return "the pod is being deleted"
	case decision.ReasonFinished:
		return "the pod has finished (" + string(e.in.Pod.Status.Phase) + ")"
	case decision.ReasonProxyDone:
		return "istio-proxy has terminated already"
	case decision.ReasonRestartAlways:
		return "restartPolicy Always: not a run-to-completion pod"
	case decision.ReasonNoApps:
		return "every container is a sidecar: there is no app to wait for"
	case ReasonNotOptedIn:
		return "the pod is not opted in"
	}
	return e.d.Reason
}

// next says what happens next, and finds the problems that only the whole
// picture shows: a finished pod nobody will quit, a quit overdue.
func (e *explanation) next() {
	switch {
	case !e.opt.OptedIn:
		e.out.Next = "nothing: istio-aux leaves pods outside the opt-in alone"
		if decision.Decide(e.pod, e.in.Config.Decision).Outcome == decision.Quit {
			e.problem(fmt.Sprintf("its apps are done but istio-proxy still runs, and nothing will quit it: the pod stays %s until someone does (opt it in, then re-create it, or quit it now with kubectl exec -n %s %s -c %s -- pilot-agent request POST quitquitquit)",
				e.in.Pod.Status.Phase, e.in.Pod.Namespace, e.in.Pod.Name, keys.ProxyContainer))
		}
	case e.d.Outcome != decision.Ignore && !e.out.OptIn.Bridge:
		e.out.Next = "nothing: the bridge does not watch this pod (see the problems)"
	case e.d.Outcome == decision.Quit:
		e.out.Next = e.quitNext()
	case e.d.Outcome == decision.Replace:
		e.out.Next = e.replaceNext()
	case e.d.Outcome == decision.Wait:
		e.out.Next = e.waitNext()
	default:
		e.out.Next = e.ignoreNext()
	}
}

// replaceNext is what follows a Replace (Istio CNI's start race): the
// function deletes the pod for its controller to make another, as
// functions/proxyquit's replace does, unless it has no controller or its
// delete was refused.
func (e *explanation) replaceNext() string {
	switch {
	case metav1.GetControllerOf(e.in.Pod) == nil:
		return "nothing: istio-aux deletes no pod without a controller, as nothing would make it again (delete it and create it again)"
	case e.lastOf(names.ReasonPodReplaceFailed) != nil:
		return "nothing until the pod changes: istio-aux's delete was refused (see the Events)"
	}
	return "istio-aux deletes the pod, and its controller makes another (a PodReplaced Event)"
}

func (e *explanation) quitNext() string {
	if last := e.lastEvent(); last != nil && last.Reason == names.ReasonProxyQuitFailed {
		if strings.Contains(last.Message, "for good") {
			return "nothing until the pod changes: istio-aux's quit failed for good (see the Events)"
		}
		return "istio-aux retries the quit with back-off (it failed: see the Events)"
	}
	stale := staleAfter
	if e.in.Pod.Labels[keys.LabelWatched] != "true" {
		// The bridge's cluster-wide watch selects the webhook's label; a pod
		// without it is found by the sweep, once a resync period.
		stale = settings.DefaultResync + staleAfter
		e.check(fmt.Sprintf("kubectl get pod -n %s %s -L %s", e.in.Pod.Namespace, e.in.Pod.Name, keys.LabelWatched))
		if done := e.appsDoneAt(); done.IsZero() || e.in.Now.Sub(done) <= stale {
			return fmt.Sprintf("istio-aux will quit istio-proxy once its sweep finds this pod, which the webhook did not label %s=true "+
				"(created before its namespace opted in, before istio-aux, or while the webhook was not called): within one resync period (%v by default)",
				keys.LabelWatched, settings.DefaultResync)
		}
	}
	if done := e.appsDoneAt(); !done.IsZero() && e.in.Now.Sub(done) > stale {
		e.problem(fmt.Sprintf("its apps finished %s ago and istio-proxy still runs: a healthy istio-aux quits it within seconds",
			e.in.Now.Sub(done).Round(time.Second)), "kubectl istio-aux check")
		return "istio-aux should have quit istio-proxy by now"
	}
	return "istio-aux will quit istio-proxy within seconds"
}

// appsDoneAt is when the last app finished (zero when unknown).
func (e *explanation) appsDoneAt() time.Time {
	var last time.Time
	for _, a := range e.out.Apps {
		if s := statusOf(e.in.Pod, a.Name); s != nil && s.State.Terminated != nil && s.State.Terminated.FinishedAt.After(last) {
			last = s.State.Terminated.FinishedAt.Time
		}
	}
	return last
}

func (e *explanation) waitNext() string {
	var waitingFor []string
	for _, a := range e.out.Apps {
		if a.State != "terminated" || a.RunsAgain != nil && *a.RunsAgain {
			waitingFor = append(waitingFor, a.Name+" ("+a.State+")")
		}
	}
	what := "waiting for app " + strings.Join(waitingFor, ", ")
	if e.d.Reason != decision.ReasonAppsRunning {
		what = "waiting for the kubelet to run app " + strings.Join(waitingFor, ", ") + " again"
	}
	return what + "; istio-aux quits istio-proxy once no app will run again"
}

func (e *explanation) ignoreNext() string {
	quit := ""
	if ev := e.lastOf(names.ReasonProxyQuit); ev != nil {
		quit = " (istio-aux quit it at " + stamp(ev.Time) + ")"
	}
	switch e.d.Reason {
	case decision.ReasonNativeSidecar:
		return "nothing: the kubelet stops a native sidecar once the apps are done"
	case decision.ReasonFinished, decision.ReasonProxyDone:
		return "nothing: istio-proxy has stopped" + quit
	case decision.ReasonDeleting:
		return "nothing: the pod is being deleted"
	}
	return "nothing: istio-aux has nothing to do with this pod"
}

// verdict sums the pod up.
func (e *explanation) verdict() {
	switch {
	case len(e.out.Problems) > 0:
		e.out.Verdict = VerdictProblem
	case !e.opt.OptedIn, e.d.Reason == decision.ReasonNoProxy, e.d.Reason == decision.ReasonRestartAlways, e.d.Reason == decision.ReasonNoApps:
		e.out.Verdict = VerdictOutside
	default:
		e.out.Verdict = VerdictOK
	}
}

// proxyRunning reports whether istio-proxy, classic or native, has not
// terminated.
func (e *explanation) proxyRunning() bool {
	s := e.pod.ContainerStatus(keys.ProxyContainer, e.out.Proxy == ProxyNative)
	return s != nil && s.State.Terminated == nil && e.in.Pod.Status.Phase != corev1.PodSucceeded && e.in.Pod.Status.Phase != corev1.PodFailed
}
