package dispatch

import (
	"net/http"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// Action is what the dispatcher does with a message after a delivery.
type Action int

const (
	// Ack: delivered; the message leaves the work queue.
	Ack Action = iota
	// Nak: deliver again later, with back-off (a scheduled retry).
	Nak
	// Term: never deliverable for this pod state; do not redeliver, and
	// remember the state as a final failure (final.Bucket).
	Term
)

func (a Action) String() string {
	return [...]string{"ack", "nak", "term"}[a]
}

// Classify maps a sink result to an action and a metric class (2xx, 4xx,
// 5xx, error), the same for HTTP and in-process results. Like Knative
// delivery, 404, 408, 409 and 429 are retried; so are 401 and 403, which a
// mesh or policy layer in front of the function (or a token not yet valid,
// a ServiceAccount not yet bound) answers while a deployment converges:
// dropping the event would leave its pod to the resync, minutes later.
// Retries are spaced out and bounded (MaxDeliver). Other 4xx are final.
func Classify(res cloudevents.Result) (Action, string) {
	var r *cehttp.Result
	if cloudevents.ResultAs(res, &r) {
		switch c := r.StatusCode; {
		case c >= 200 && c < 300:
			return Ack, "2xx"
		case c == http.StatusUnauthorized, c == http.StatusForbidden, c == http.StatusNotFound,
			c == http.StatusRequestTimeout, c == http.StatusConflict, c == http.StatusTooManyRequests:
			return Nak, "4xx"
		case c >= 400 && c < 500:
			return Term, "4xx"
		default:
			return Nak, "5xx"
		}
	}
	if res == nil || cloudevents.IsACK(res) {
		return Ack, "2xx"
	}
	// Connection refused, a timeout, a NACK without a status: retry.
	return Nak, "error"
}
