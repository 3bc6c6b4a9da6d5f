package admission

import (
	"encoding/json"
	"os"
	"testing"
)

// mergeRow is one row of testdata/merge.json: a pod in an opted-in
// namespace whose proxy.istio.io/config is Config (absent when nil), what
// the webhook does with it (Outcome, Reason, the annotation it leaves:
// Want), and what istiod then does with that pod (Istiod: "hold",
// "no hold" or "rejected"; IstiodProxyConfig: fields the injected proxy's
// PROXY_CONFIG must hold). TestMutate checks the first half; test/e2e
// (TestWebhookOutputThroughIstiod) the second, with the real istiod.
type mergeRow struct {
	Name              string         `json:"name"`
	Config            *string        `json:"config"`
	Outcome           Outcome        `json:"outcome"`
	Reason            string         `json:"reason"`
	Want              string         `json:"want"`
	Istiod            string         `json:"istiod"`
	IstiodProxyConfig map[string]any `json:"istiodProxyConfig"`
}

func mergeRows(t *testing.T) []mergeRow {
	t.Helper()
	b, err := os.ReadFile("testdata/merge.json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []mergeRow
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatalf("testdata/merge.json: %v", err)
	}
	return rows
}

func (r mergeRow) reasonText(t *testing.T) string {
	t.Helper()
	switch r.Reason {
	case "hold":
		return ReasonHold
	case "user hold":
		return ReasonUserHold
	case "bad":
		return ReasonBadProxyConfig
	}
	t.Fatalf("row %q: reason %q is not hold, user hold or bad", r.Name, r.Reason)
	return ""
}

// Every row says what istiod does, so test/e2e can check it.
func TestMergeRowsAreComplete(t *testing.T) {
	for _, r := range mergeRows(t) {
		switch r.Istiod {
		case "hold", "no hold", "rejected":
		default:
			t.Errorf("row %q: istiod %q, want hold, no hold or rejected", r.Name, r.Istiod)
		}
		if r.Outcome == Mutated && r.Istiod != "hold" {
			t.Errorf("row %q: the webhook added the hold but istiod is expected to %q", r.Name, r.Istiod)
		}
	}
}
