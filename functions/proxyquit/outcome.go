package proxyquit

import (
	"context"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/istio-aux/istio-aux/pkg/decision"
)

// Outcome is what became of one event: the `outcome` label of the events
// counter, the log line's outcome and the answer's first word. The set is
// closed so the metric's cardinality stays small.
type Outcome string

// Outcomes, with the HTTP status each answers with.
const (
	OutcomeInvalid     Outcome = "invalid"      // 400: the event can never be handled
	OutcomeIgnored     Outcome = "ignored"      // 200: not ours, or nothing left to do
	OutcomeWait        Outcome = "wait"         // 200: apps not done; a later event will come
	OutcomeQuit        Outcome = "quit"         // 200: the quit command ran
	OutcomeReplaced    Outcome = "replaced"     // 200: a pod Istio CNI's start race left unable to start was deleted
	OutcomeFailed      Outcome = "failed"       // 500: the quit command failed; retried
	OutcomeFailedFinal Outcome = "failed_final" // 422: the quit cannot succeed for this pod state; tried again when the pod changes
	OutcomeGone        Outcome = "gone"         // 200: the pod is gone, or its proxy exited under a failed exec
	OutcomeUIDMismatch Outcome = "uid_mismatch" // 200: the name now belongs to another pod
	OutcomeNotOptedIn  Outcome = "not_opted_in" // 200: the live pod is not opted in
	OutcomeError       Outcome = "error"        // 503: the API server could not answer; retried
	// HTTP only: callers that may not deliver events.
	OutcomeUnauthenticated Outcome = "unauthenticated" // 401: no token, or one not valid for the audience
	OutcomeForbidden       Outcome = "forbidden"       // 403: a valid token of a caller that is not allowed
)

// result is what handle decided, before it becomes a CloudEvents result.
type result struct {
	code    int
	outcome Outcome
	detail  string
	err     error
}

// contextEnded is a retryable result when ctx is done.
func contextEnded(ctx context.Context) (result, bool) {
	if err := ctx.Err(); err != nil {
		return result{code: http.StatusServiceUnavailable, outcome: OutcomeError, detail: "the request ended", err: err}, true
	}
	return result{}, false
}

// decided turns a decision that does not act (Outcome.Acts) into a final result. A pod whose
// proxy already terminated is Ignore too: that is what makes duplicate and
// late events harmless.
func decided(d decision.Decision) result {
	if d.Outcome == decision.Wait {
		return result{code: http.StatusOK, outcome: OutcomeWait, detail: d.Reason}
	}
	return result{code: http.StatusOK, outcome: OutcomeIgnored, detail: d.Reason}
}

// apiFailure maps a GET error: NotFound is success (nothing left to quit),
// anything else may pass, so the event is retried.
func apiFailure(what string, err error) result {
	if apierrors.IsNotFound(err) {
		return result{code: http.StatusOK, outcome: OutcomeGone, detail: what + " not found"}
	}
	return result{code: http.StatusServiceUnavailable, outcome: OutcomeError, detail: "reading " + what, err: err}
}
