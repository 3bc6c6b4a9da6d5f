package slim

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// allocated is the heap f allocates, in bytes: the least of three calls.
// TotalAlloc counts what every goroutine of the process allocates (the
// runtime's and the testing package's too), which only adds to a call's
// figure; what f allocates is the same each call.
func allocated(f func()) uint64 {
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

func TestDecodeBounds(t *testing.T) {
	list := func(n int, item string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
	}
	cases := map[string]struct {
		json    string
		wantErr string
	}{
		"containers at the bound":   {json: `{"spec":{"containers":` + list(MaxContainers, `{"name":"a"}`) + `}}`},
		"containers past the bound": {json: `{"spec":{"containers":` + list(MaxContainers+1, `{}`) + `}}`, wantErr: "more than 256 containers"},
		"init containers":           {json: `{"spec":{"initContainers":` + list(MaxContainers+1, `{}`) + `}}`, wantErr: "more than 256 containers"},
		"statuses":                  {json: `{"status":{"containerStatuses":` + list(MaxContainers+1, `{}`) + `}}`, wantErr: "more than 256 container statuses"},
		"init statuses":             {json: `{"status":{"initContainerStatuses":` + list(MaxContainers+1, `{}`) + `}}`, wantErr: "more than 256 container statuses"},
		"rules":                     {json: `{"spec":{"containers":[{"restartPolicyRules":` + list(MaxRules+1, `{}`) + `}]}}`, wantErr: "more than 20 restart rules"},
		"exit codes": {json: `{"spec":{"containers":[{"restartPolicyRules":[{"exitCodes":{"values":` + list(MaxExitCodes+1, `1`) + `}}]}]}}`,
			wantErr: "more than 255 exit codes"},
		"null lists":              {json: `{"spec":{"containers":null,"initContainers":null},"status":{"containerStatuses":null}}`},
		"a list that is no list":  {json: `{"spec":{"containers":{}}}`, wantErr: "containers"},
		"a label that is no text": {json: `{"metadata":{"labels":{"istio-aux.dev/enabled":1}}}`, wantErr: "want a string"},
		"labels that are no map":  {json: `{"metadata":{"labels":[]}}`, wantErr: `want "{"`},
	}
	for name, tc := range cases {
		var p Pod
		err := json.Unmarshal([]byte(tc.json), &p)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.wantErr)
		}
	}
}

func TestDecodeKeepsOnlyTheKeptKeys(t *testing.T) {
	var labels strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&labels, `"l%d":"v",`, i)
	}
	raw := `{"metadata":{"name":"p","labels":{` + labels.String() + `"istio-aux.dev/enabled":"true"},` +
		`"annotations":{"istio-aux.dev/sidecars":"a,b","sidecar.istio.io/status":"{...}","istio-aux.dev/enabled":"false"}}}`
	var p Pod
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		t.Fatal(err)
	}
	want := Meta{Name: "p", Labels: Kept{"istio-aux.dev/enabled": "true"},
		Annotations: Kept{"istio-aux.dev/sidecars": "a,b", "istio-aux.dev/enabled": "false"}}
	if d := cmp.Diff(want, p.Meta); d != "" {
		t.Errorf("metadata (-want +got):\n%s", d)
	}
}

// TestDecodeHostileBodyIsCheap: a 1 MiB body of empty containers — which,
// decoded into a v1.Pod, peaked at 474 MiB of RSS in the function — is
// refused after the bound, having allocated a small fraction of the body.
func TestDecodeHostileBodyIsCheap(t *testing.T) {
	body := `{"spec":{"containers":[` + strings.Repeat(`{},`, (1<<20)/3) + `{}]}}`
	var err error
	n := allocated(func() {
		var p Pod
		err = json.Unmarshal([]byte(body), &p)
	})
	if err == nil {
		t.Fatal("decoded a pod with 350k containers")
	}
	// The body itself is copied once by []byte(body): 1 MiB.
	if limit := uint64(len(body)) + 512<<10; n > limit {
		t.Errorf("decoding allocated %d KiB, want at most %d KiB", n>>10, limit>>10)
	}
	t.Logf("1 MiB hostile body: refused (%v), %d KiB allocated", err, n>>10)
}
