package dispatch

import (
	"context"
	"errors"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

func TestClassify(t *testing.T) {
	cases := map[string]struct {
		res    cloudevents.Result
		action Action
		class  string
	}{
		"nil":               {nil, Ack, "2xx"},
		"ACK":               {protocol.ResultACK, Ack, "2xx"},
		"200":               {cehttp.NewResult(200, "ok"), Ack, "2xx"},
		"202":               {cehttp.NewResult(202, "ok"), Ack, "2xx"},
		"200 wrapping ACK":  {cehttp.NewResult(200, "%w", protocol.ResultACK), Ack, "2xx"},
		"400":               {cehttp.NewResult(400, "bad"), Term, "4xx"},
		"401 is retried":    {cehttp.NewResult(401, "who?"), Nak, "4xx"},
		"403 is retried":    {cehttp.NewResult(403, "no"), Nak, "4xx"},
		"408 is retried":    {cehttp.NewResult(408, "slow"), Nak, "4xx"},
		"409 is retried":    {cehttp.NewResult(409, "conflict"), Nak, "4xx"},
		"413":               {cehttp.NewResult(413, "too big"), Term, "4xx"},
		"415":               {cehttp.NewResult(415, "what"), Term, "4xx"},
		"404 is retried":    {cehttp.NewResult(404, "later"), Nak, "4xx"},
		"429 is retried":    {cehttp.NewResult(429, "slow down"), Nak, "4xx"},
		"500":               {cehttp.NewResult(500, "boom"), Nak, "5xx"},
		"503":               {cehttp.NewResult(503, "busy"), Nak, "5xx"},
		"wrapped 400":       {protocol.NewReceipt(false, "%w", cehttp.NewResult(400, "bad")), Term, "4xx"},
		"NACK":              {protocol.ResultNACK, Nak, "error"},
		"plain error":       {errors.New("dial tcp: refused"), Nak, "error"},
		"deadline exceeded": {context.DeadlineExceeded, Nak, "error"},
	}
	for name, tc := range cases {
		a, class := Classify(tc.res)
		if a != tc.action || class != tc.class {
			t.Errorf("%s: Classify = %v/%s, want %v/%s", name, a, class, tc.action, tc.class)
		}
	}
}
