// Package agree holds the webhook's reading of proxy.istio.io/config to
// Istio's own: a differential fuzz test between istio-aux's
// webhook/proxyconfig.MergeHold and istiod's code at the version the harness
// builds (pkg/config/mesh ApplyProxyConfig, the injector's reading of the
// annotation; pkg/config/validation/agent, its validation of it). It lives in
// the Istio tools module so that Istio's code runs with the dependencies
// istiod is built with, and istio-aux's module never requires
// istio.io/istio; the webhook's side runs as a process built from istio-aux's
// module (webhook/proxyconfig/cmd/mergehold), with the webhook's.
//
// make test runs the seeds; make fuzz (hack/fuzz.sh) fuzzes it:
//
//	cd hack/tools/istio && go test -run XXX -fuzz FuzzAgreesWithIstio -fuzztime 5m ./agree/
package agree

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/config/validation/agent"
	"istio.io/istio/pkg/util/protomarshal"
)

// FuzzAgreesWithIstio: wherever the webhook mutates, Istio accepts the
// user's config, reads no hold in it, accepts the merged config and reads it
// as the user's plus holdApplicationUntilProxyStarts: true, and its
// validation of the annotation says the same of both. Wherever the webhook
// says Istio rejects a config, Istio does.
func FuzzAgreesWithIstio(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	ours := startOurs(f)
	f.Fuzz(func(t *testing.T, config string) {
		// An annotation reaches both through JSON, which makes any text
		// valid UTF-8.
		config = strings.ToValidUTF8(config, "\uFFFD")
		a := ours.mergeHold(t, config)
		before, beforeErr := istioReads(config)
		switch {
		case a.Changed:
			checkMerge(t, config, a.Merged, before, beforeErr)
		case strings.HasSuffix(a.Error, "Istio rejects it") && beforeErr == nil:
			t.Fatalf("the webhook says Istio rejects %q, but Istio reads it\nwebhook: %s", config, a.Error)
		}
	})
}

// checkMerge checks a config the webhook merged the hold into.
func checkMerge(t *testing.T, config, merged string, before *meshconfig.ProxyConfig, beforeErr error) {
	t.Helper()
	if beforeErr != nil {
		t.Fatalf("the webhook mutated %q, which Istio rejects: %v", config, beforeErr)
	}
	if h := before.GetHoldApplicationUntilProxyStarts(); h != nil {
		t.Fatalf("the webhook mutated %q, in which Istio reads %s: %v", config, holdKey, h.GetValue())
	}
	after, err := istioReads(merged)
	if err != nil {
		t.Fatalf("Istio rejects the merged config %q (from %q): %v", merged, config, err)
	}
	want := proto.Clone(before).(*meshconfig.ProxyConfig)
	want.HoldApplicationUntilProxyStarts = wrapperspb.Bool(true)
	if !proto.Equal(after, want) {
		t.Fatalf("Istio reads the merged config differently:\nbefore %q\n  %v\nafter  %q\n  %v", config, before, merged, after)
	}
	if v1, v2 := istioValidates(config), istioValidates(merged); (v1 == nil) != (v2 == nil) {
		t.Fatalf("Istio's validation changed with the merge:\nbefore %q: %v\nafter  %q: %v", config, v1, merged, v2)
	}
}

const holdKey = "holdApplicationUntilProxyStarts"

// istioReads is the ProxyConfig istiod's injector reads from the annotation
// (inject.go and webhook.go: mesh.ApplyProxyConfig onto the mesh config),
// or why it rejects it.
func istioReads(config string) (*meshconfig.ProxyConfig, error) {
	mc, err := mesh.ApplyProxyConfig(config, mesh.DefaultMeshConfig())
	if err != nil {
		return nil, err
	}
	return mc.GetDefaultConfig(), nil
}

// istioValidates is the injector's validation of the annotation
// (pkg/kube/inject validateProxyConfig, which is not exported: the same two
// calls).
func istioValidates(config string) error {
	pc := mesh.DefaultProxyConfig()
	if err := protomarshal.ApplyYAML(config, pc); err != nil {
		return err
	}
	return agent.ValidateMeshConfigProxyConfig(pc).Err
}

// answer is mergehold's line for one config.
type answer struct {
	Merged  string `json:"merged"`
	Changed bool   `json:"changed"`
	Error   string `json:"error"`
	Limit   bool   `json:"limit"`
}

// ours is a running mergehold: the webhook's MergeHold, one config at a time.
type ours struct {
	mu  sync.Mutex
	in  *json.Encoder
	out *bufio.Scanner
}

// startOurs builds mergehold from istio-aux's module (three directories up)
// and starts it for the life of the test process (each fuzzing worker has
// its own).
func startOurs(tb testing.TB) *ours {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "mergehold")
	build := exec.Command("go", "build", "-o", bin, "./webhook/proxyconfig/cmd/mergehold")
	build.Dir = filepath.Join("..", "..", "..", "..")
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("building mergehold: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	out := bufio.NewScanner(stdout)
	out.Buffer(make([]byte, 64<<10), 16<<20)
	return &ours{in: json.NewEncoder(stdin), out: out}
}

func (o *ours) mergeHold(t *testing.T, config string) answer {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.in.Encode(config); err != nil {
		t.Fatalf("writing to mergehold: %v", err)
	}
	if !o.out.Scan() {
		t.Fatalf("mergehold ended: %v", o.out.Err())
	}
	var a answer
	if err := json.Unmarshal(o.out.Bytes(), &a); err != nil {
		t.Fatalf("mergehold said %q: %v", o.out.Bytes(), err)
	}
	return a
}

// seeds are the configs of the webhook's merge table
// (webhook/admission/testdata/merge.json, which test/e2e also runs through istiod)
// and the forms that disagreed with Istio before (issue 24, rows 5 and 6).
func seeds(tb testing.TB) []string {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "webhook", "admission", "testdata", "merge.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var rows []struct {
		Config *string `json:"config"`
	}
	if err := json.Unmarshal(raw, &rows); err != nil {
		tb.Fatal(err)
	}
	out := []string{
		"!!binary aG9sZEFwcGxpY2F0aW9uVW50aWxQcm94eVN0YXJ0cw==: false",
		"{!!binary aG9sZEFwcGxpY2F0aW9uVW50aWxQcm94eVN0YXJ0cw==: false}",
		"? !!binary aG9sZEFwcGxpY2F0aW9uVW50aWxQcm94eVN0YXJ0cw==\n: false",
		"!!binary aG9sZF9hcHBsaWNhdGlvbl91bnRpbF9wcm94eV9zdGFydHM=: true",
		"concurrency: .nan", "concurrency: .inf", "tracing: {sampling: -.Inf}", "a: .NaN",
		"concurrency: x", "concurrency: 2\ndrainDuration: 0s", "\t", "", "# only a comment",
		"holdApplicationUntilProxyStarts: !!bool yes", "hold_application_until_proxy_starts: ~",
		"{\"concurrency\": 2, \"proxyMetadata\": {\"A\": \"1\"}}", "concurrency: !!str 2",
		"proxyStatsMatcher: {inclusionPrefixes: [a, b]}\nunknownField: 1",
	}
	for _, r := range rows {
		if r.Config != nil {
			out = append(out, *r.Config)
		}
	}
	return out
}
