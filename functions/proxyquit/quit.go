package proxyquit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// quit execs the quit command in istio-proxy and records what happened.
//
// The quit's record, its ProxyQuit Event, is written first, as its
// intent: a process that dies right after the exec (its node powered
// off) has left it, and the redelivery, which reads the proxy stopped
// and has nothing to do, needs none. An Event that cannot be written is
// counted and logged (unwrittenEvent). One failing past its deadline (the
// API server failing, through which the exec would go too) means no
// quit: the event is answered 503, to be delivered again. One refused for
// good (RBAC, quota, a namespace being deleted), which no delivery could
// write, lets the quit go ahead without it: a record never holds a Job
// up. An exec that fails while the proxy still runs, or whose pod is gone
// without its proxy seen stopped, did not quit it: its Event is deleted.
// An exec whose failure may be the quit itself, on a pod still there,
// keeps it until a redelivery settles it. The windows left: a process that
// dies between the Event and the exec, or an exec that may have quit,
// leaves an Event ahead of its quit until the redelivery (the message is
// not acked) makes it.
//
// A recorder that cannot wait (New's caller's) can neither tell that the
// Event is written nor delete it: it records after the exec, as it did.
func (f *Function) quit(ctx context.Context, pod *corev1.Pod, d decision.Decision, argv []string) result {
	msg := "Quit istio-proxy: " + d.Reason
	w, ahead := f.recorder.(eventWaiter)
	after := !ahead // recorded after the exec, as a recorder that cannot wait does
	if ahead {
		wctx, wcancel := f.recordContext(ctx)
		err := w.EventAndWait(wctx, pod, true, corev1.EventTypeNormal, names.ReasonProxyQuit, msg)
		wcancel()
		switch {
		case errors.Is(err, errEventRefused):
			ahead = false // nothing to take back; counted and logged as rejected
		case err != nil:
			return result{code: http.StatusServiceUnavailable, outcome: OutcomeError,
				detail: "the quit's ProxyQuit Event could not be written; not quitting", err: err}
		}
		// The caller gave up while the Event was written: it delivers the
		// event again, which finds the Event there and quits.
		if r, ended := contextEnded(ctx); ended {
			return r
		}
	}
	ectx, cancel := context.WithTimeout(ctx, f.cfg.ExecTimeout)
	start := f.now()
	out, err := f.exec.Exec(ectx, pod.Namespace, pod.Name, keys.ProxyContainer, argv)
	cancel()
	end := f.now()
	elapsed := end.Sub(start).Seconds()
	if err == nil {
		f.metrics.execDuration.WithLabelValues("ok").Observe(elapsed)
		if after {
			f.record(ctx, pod, true, corev1.EventTypeNormal, names.ReasonProxyQuit, msg)
		}
		return result{code: http.StatusOK, outcome: OutcomeQuit, detail: "quit istio-proxy: " + d.Reason}
	}
	f.metrics.execDuration.WithLabelValues("error").Observe(elapsed)

	// The proxy may have exited between our GET and the exec (another
	// replica quit it, or the quit itself tore the stream down): that is
	// success, and only a fresh read can tell it apart from a failure. A
	// failure that may be the quit itself is watched a little longer: the
	// kubelet reports the stopped proxy a moment later.
	wait := time.Duration(0)
	underWay := quitMayBeUnderWay(err)
	if underWay {
		wait = quitWatch(start, end, f.cfg.ExecTimeout, f.exitWait)
	}
	gone, stopped, why := f.proxyGone(ctx, pod, wait)
	// What is recorded after the exec, its ProxyQuit Event taken back and
	// a ProxyQuitFailed, shares one deadline, as the one Event written
	// after it did: the request stays within its caller's 30 s
	// (TestQuitWatchStaysWithinTheRequest).
	rctx, rcancel := f.recordContext(ctx)
	defer rcancel()
	// An exec that did not quit the proxy takes its Event back (deleted by
	// its name; one that cannot be is counted and logged, cause
	// undeleted, and stays on the pod). One that may yet have quit it (cut
	// off, timed out, killed with its container) and whose pod is still
	// there keeps it, if the event is delivered again: the kubelet may
	// report the stop later than the watch (a loaded node), and then the
	// redelivery, reading the proxy stopped, has nothing to do and could
	// not write it again; while the proxy still runs, the redelivery quits
	// it under the same Event, or takes it back if that exec fails for
	// sure. A failure for good (422) is not delivered again: nothing would
	// settle a kept Event.
	reason, final := finalFailure(err)
	kept := ahead && !stopped && !gone && underWay && !final
	if ahead && !stopped && !kept {
		_ = w.DeleteAndWait(rctx, pod, names.ReasonProxyQuit)
	}
	if gone {
		// Nothing left to quit. The proxy stopped as it was told to
		// quit, or before: the Event written before the exec is the
		// quit's record. A pod gone or going whose proxy was not seen to
		// stop had its Event taken back: nothing says this exec quit it.
		if stopped && after {
			f.recordWithin(rctx, pod, true, corev1.EventTypeNormal, names.ReasonProxyQuit,
				fmt.Sprintf("Quit istio-proxy: %s (%s; the exec of the quit command ended with: %v)", d.Reason, why, err))
		}
		return result{code: http.StatusOK, outcome: OutcomeGone, detail: fmt.Sprintf("exec failed but %s (the exec ended with: %v)", why, err)}
	}
	f.metrics.execFailures.Inc()
	msg = err.Error()
	if out.Stderr != "" {
		msg += "; stderr: " + out.Stderr
	}
	if kept {
		msg += " (the quit may be under way: its ProxyQuit Event stays until a retry finds the proxy stopped or quits it)"
	}
	if final {
		f.metrics.finalFailures.WithLabelValues(reason).Inc()
		f.recordWithin(rctx, pod, false, corev1.EventTypeWarning, names.ReasonProxyQuitFailed,
			fmt.Sprintf("Quitting istio-proxy failed for good (%s); istio-aux tries again when the pod changes: %s", reason, msg))
		return result{code: http.StatusUnprocessableEntity, outcome: OutcomeFailedFinal, detail: "quit command failed for good: " + reason, err: err}
	}
	f.recordWithin(rctx, pod, false, corev1.EventTypeWarning, names.ReasonProxyQuitFailed, "Quitting istio-proxy failed (will retry): "+msg)
	return result{code: http.StatusInternalServerError, outcome: OutcomeFailed, detail: "quit command failed", err: err}
}

// exitWait bounds how long proxyGone watches a pod whose exec failed in a
// way that may be the quit itself (the command killed with its container,
// the stream cut). An idle kubelet reports a stopped container within a
// second or two; on a loaded node it takes longer: with 24 proxies
// stopping at once on two cores (TestNodeKnativeBurst) some took more
// than 3 s, and their pods were left with a ProxyQuitFailed instead of
// their ProxyQuit. The exec and the watch together stay within the exec's
// timeout and half this (quitWatch), so that the request, the Event's
// write included, stays within the dispatcher's and Knative's 30 s.
const exitWait = 10 * time.Second

// quitWatch is how long to watch for the proxy's stop after an exec that
// started at start and ended at now: exitWait, but no later than the
// exec's timeout and half of exitWait after start.
func quitWatch(start, now time.Time, execTimeout, exitWait time.Duration) time.Duration {
	return max(0, min(exitWait, start.Add(execTimeout+exitWait/2).Sub(now)))
}

// proxyGone re-reads the pod after a failed exec, and again for up to wait
// while its proxy still runs. gone is true if there is nothing left to
// quit, stopped if that is because istio-proxy has terminated.
func (f *Function) proxyGone(ctx context.Context, pod *corev1.Pod, wait time.Duration) (gone, stopped bool, why string) {
	ctx = context.WithoutCancel(ctx)
	until := time.Now().Add(wait)
	for every := exitPoll; ; every *= 2 {
		if gone, stopped, why = f.readProxy(ctx, pod); gone {
			return gone, stopped, why
		}
		left := time.Until(until)
		if left <= 0 {
			return false, false, ""
		}
		t := time.NewTimer(min(every, left))
		<-t.C
	}
}

// exitPoll is the first interval between proxyGone's reads (doubling).
const exitPoll = 200 * time.Millisecond

// readProxy reads the pod once for proxyGone.
func (f *Function) readProxy(ctx context.Context, pod *corev1.Pod) (gone, stopped bool, why string) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	// The most recent state (etcd): whether the proxy has stopped since.
	live, err := f.cluster.Pod(ctx, pod.Namespace, pod.Name, "")
	switch {
	case apierrors.IsNotFound(err):
		return true, false, "the pod is gone"
	case err != nil:
		return false, false, ""
	case live.UID != pod.UID:
		return true, false, "the pod was replaced"
	case live.DeletionTimestamp != nil:
		return true, false, "the pod is being deleted"
	}
	// A classic proxy's status, or a native one's (QuitNative).
	for _, s := range append(live.Status.ContainerStatuses, live.Status.InitContainerStatuses...) {
		if s.Name == keys.ProxyContainer && s.State.Terminated != nil {
			return true, true, "istio-proxy has terminated"
		}
	}
	return false, false, ""
}
