package proxyquit

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/istio-aux/istio-aux/pkg/decision"
)

// Outcomes of one event, the `outcome` label of the events counter. The set
// is closed so the metric's cardinality stays small.
const (
	OutcomeInvalid     = "invalid"      // 400: the event can never be handled
	OutcomeIgnored     = "ignored"      // 200: not ours, or nothing left to do
	OutcomeWait        = "wait"         // 200: apps not done; a later event will come
	OutcomeQuit        = "quit"         // 200: the quit command ran
	OutcomeFailed      = "failed"       // 500: the quit command failed; retried
	OutcomeFailedFinal = "failed_final" // 422: the quit cannot succeed for this pod state; tried again when the pod changes
	OutcomeGone        = "gone"         // 200: the pod is gone, or its proxy exited under a failed exec
	OutcomeUIDMismatch = "uid_mismatch" // 200: the name now belongs to another pod
	OutcomeNotOptedIn  = "not_opted_in" // 200: the live pod is not opted in
	OutcomeError       = "error"        // 503: the API server could not answer; retried
	// HTTP only: callers that may not deliver events.
	OutcomeUnauthenticated = "unauthenticated" // 401: no token, or one not valid for the audience
	OutcomeForbidden       = "forbidden"       // 403: a valid token of a caller that is not allowed
)

// result is what handle decided, before it becomes a CloudEvents result.
type result struct {
	code    int
	outcome string
	detail  string
	err     error
}

// contextEnded is a retryable result when ctx is done.
func contextEnded(ctx context.Context) (result, bool) {
	if err := ctx.Err(); err != nil {
		return result{code: 503, outcome: OutcomeError, detail: "the request ended", err: err}, true
	}
	return result{}, false
}

// decided turns a decision that is not Quit into a final result. A pod whose
// proxy already terminated is Ignore too: that is what makes duplicate and
// late events harmless.
func decided(d decision.Decision) result {
	if d.Outcome == decision.Wait {
		return result{code: 200, outcome: OutcomeWait, detail: d.Reason}
	}
	return result{code: 200, outcome: OutcomeIgnored, detail: d.Reason}
}

// apiFailure maps a GET error: NotFound is success (nothing left to quit),
// anything else may pass, so the event is retried.
func apiFailure(what string, err error) result {
	if apierrors.IsNotFound(err) {
		return result{code: 200, outcome: OutcomeGone, detail: what + " not found"}
	}
	return result{code: 503, outcome: OutcomeError, detail: "reading " + what, err: err}
}
