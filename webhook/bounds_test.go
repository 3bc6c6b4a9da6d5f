package webhook

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	admissionv1 "k8s.io/api/admission/v1"
	"knative.dev/pkg/logging"
	kjson "sigs.k8s.io/json"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/webhook/admission"
	"github.com/istio-aux/istio-aux/webhook/admission/admissiontest"
	"github.com/istio-aux/istio-aux/webhook/proxyconfig"
)

// The bounds every Admit must keep, whatever proxy.istio.io/config holds:
// the API server's webhook timeout is 5 s and the webhook's memory limit
// 256 MiB, and one pod CREATE must use neither up.
const (
	admitTimeBound  = 5 * time.Millisecond
	admitBytesBound = 1 << 20
	// maxAnnotations is the API server's limit on a pod's annotations, keys
	// and values together.
	maxAnnotations = 256 << 10
)

// Attacks on the proxy config that cost seconds and hundreds of MiB before
// the bounds (issue 15), with the outcome they must have now.
//
//	go test -run 'TestAdmitBounds$' -v ./webhook/
func TestAdmitBounds(t *testing.T) {
	longest := maxAnnotations - len(keys.AnnotationProxyConfig)
	cases := []struct {
		name, config string
		escaped      bool // JSON escapes most of it: see admitTimeLimit
	}{
		{"alias bomb (240 KB)", aliasBomb(240_000), false},
		{"16,000 keys (145 KiB)", manyKeys(16_000), false},
		{"long scalar (256 KiB of annotations)", "a: " + strings.Repeat("x", longest-3), false},
		{"deep nesting (9,999 flow levels)", deepFlow(9_999), false},
		{"deep nesting (block, 256 KiB)", deepBlock(longest), false},
		// JSON escapes each & as \u0026: a 1.5 MiB object.
		{"256 KiB of &, 6 times as long in JSON", strings.Repeat("&", longest), true},
	}
	fx := newFixture(t, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	ctx := logging.WithLogger(context.Background(), zap.NewNop().Sugar())
	for _, tc := range cases {
		if len(tc.config) > longest {
			t.Fatalf("%s: %d bytes, over the API server's limit", tc.name, len(tc.config))
		}
		body := reviewBody(t, podRequest(t, "ml", nil, map[string]string{keys.AnnotationProxyConfig: tc.config}))
		d, b, resp := measureAdmit(ctx, fx.r, body)
		limit := admitTimeBound
		if tc.escaped {
			limit = admitTimeLimit(body, admitTimeBound)
		}
		t.Logf("%-38s %6.1f KiB (JSON %7.1f KiB)  %9v (limit %v)  %8.1f KiB  patch=%v warning=%q", tc.name,
			float64(len(tc.config))/1024, float64(len(body))/1024, d.Round(time.Microsecond), limit.Round(time.Microsecond),
			float64(b)/1024, resp.Patch != nil, strings.TrimPrefix(strings.Join(resp.Warnings, "; "), admission.WarningPrefix))
		if !resp.Allowed || touchesAnnotations(t, resp.Patch) || len(resp.Warnings) != 1 {
			t.Errorf("%s: want allowed, unchanged, one warning; got allowed=%v patch=%s warnings=%q", tc.name, resp.Allowed, resp.Patch, resp.Warnings)
		}
		if d > limit || b > admitBytesBound {
			t.Errorf("%s: Admit took %v and %d bytes, want ≤ %v and ≤ %d", tc.name, d, b, limit, admitBytesBound)
		}
	}
}

// admitTimeLimit is how long an admission may take on a review: bound, plus
// twice what the least a decoder can do with its JSON takes: the webhook's
// own decoder (sigs.k8s.io/json) validating it and skipping every value, the
// least of three. Decoding a review is that and little more, and JSON
// escapes <, > and & as six bytes each: 256 KiB of & in an annotation is a
// 1.5 MiB review, which takes longer to scan than the 5 ms bound on a busy
// 2-core machine. (The same decoder, so that -fuzz's instrumentation, which
// slows it, slows the reference as much.)
func admitTimeLimit(raw []byte, bound time.Duration) time.Duration {
	least := time.Duration(1<<63 - 1)
	for range 3 {
		start := time.Now()
		_ = kjson.UnmarshalCaseSensitivePreserveInts(raw, &struct{}{})
		least = min(least, time.Since(start))
	}
	return bound + 2*least
}

// measureAdmit answers the review body a few times (Review: decoding it,
// Admit, encoding the answer) and returns the least time and bytes
// allocated of the runs (other tests and processes only ever add to either)
// and the last response.
func measureAdmit(ctx context.Context, r *reconciler, body []byte) (time.Duration, uint64, *admissionv1.AdmissionResponse) {
	var (
		best      = time.Duration(1<<63 - 1)
		bestBytes = ^uint64(0)
		total     time.Duration
		out       []byte
		err       error
		before    runtime.MemStats
		after     runtime.MemStats
	)
	for range 5 {
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		out, err = r.Review(ctx, body)
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		best, bestBytes = min(best, d), min(bestBytes, after.TotalAlloc-before.TotalAlloc)
		// Inputs that take seconds (before the bounds) are measured once.
		if total += d; total > time.Second {
			break
		}
	}
	if err != nil {
		panic("not an AdmissionReview: " + err.Error())
	}
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &rv); err != nil || rv.Response == nil {
		panic(fmt.Sprintf("answer %s: %v", out, err))
	}
	return best, bestBytes, rv.Response
}

// aliasBomb is a YAML document of about size bytes: a mapping of as many
// distinct keys as fit, anchored, and 8 aliases of it. yaml.v3 refuses
// documents that are mostly alias expansions, but not the work of checking
// each expansion for repeated keys, which is quadratic in its keys.
func aliasBomb(size int) string {
	const tail = "}\nb: [*a, *a, *a, *a, *a, *a, *a, *a]\n"
	var b strings.Builder
	b.WriteString("a: &a {")
	for i := 0; b.Len() < size-len(tail)-16; i++ {
		fmt.Fprintf(&b, "k%d: 0, ", i)
	}
	b.WriteString("z: 0" + tail)
	return b.String()
}

// manyKeys is n distinct top-level keys, about 9.3 bytes each.
func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "k%d: 1\n", i)
	}
	return b.String()
}

// deepFlow nests depth flow sequences: a: [[[...]]].
func deepFlow(depth int) string {
	return "a: " + strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

// deepBlock nests block mappings, one more space of indentation per level,
// as deep as fits in size bytes.
func deepBlock(size int) string {
	var b strings.Builder
	for depth := 0; b.Len()+depth+3 <= size; depth++ {
		b.WriteString(strings.Repeat(" ", depth) + "a:\n")
	}
	return b.String()
}

// The most expensive shapes known for a config that is just under both
// limits still keep the bounds, and are read (mutated), not refused.
//
//	go test -run 'TestAdmitBoundsAtLimits$' -v ./webhook/
func TestAdmitBoundsAtLimits(t *testing.T) {
	n := func(i int) string { return fmt.Sprint(i) }
	// Two-letter keys, all distinct: repeated top-level keys are refused
	// before the second parse.
	two := func(i int) string { return string(rune('a'+i%26)) + string(rune('a'+i/26%26)) }
	cases := map[string]string{
		// One long line of flow at the start of the document is the worst
		// known: the YAML scanners queue a line's tokens (up to 1,024
		// characters) while the line could still be a key.
		"JSON on one line":          fill("{", func(i int) string { return `"` + two(i) + `": 1,` }, `"z": 1}`),
		"flow keys on one line":     fill("{", func(i int) string { return two(i) + "," }, "z}"),
		"distinct flow keys":        fill("{", func(i int) string { return "k" + n(i) + "," }, "z}"),
		"flow list":                 fill("a: [", func(int) string { return "1," }, "1]"),
		"flow lists in a flow list": fill("a: [", func(int) string { return "[]," }, "[]]"),
		"a large real ProxyConfig":  realProxyConfig,
		"nested flow maps":          "a: " + strings.Repeat("{a: ", proxyconfig.MaxLineMarks/3-1) + "1" + strings.Repeat("}", proxyconfig.MaxLineMarks/3-1),
		"deep flow":                 "a: " + strings.Repeat("[", proxyconfig.MaxLineMarks/2-1) + strings.Repeat("]", proxyconfig.MaxLineMarks/2-1),
		"deep block":                deepBlock(proxyconfig.MaxBytes),
		"distinct block keys":       fill("", func(i int) string { return "k" + n(i) + ": 1\n" }, ""),
		"block list":                fill("a:\n", func(int) string { return "- x\n" }, ""),
		"complex keys":              fill("a:\n", func(i int) string { return "  ? k" + n(i) + "\n" }, ""),
		"long scalar":               "a: " + strings.Repeat("x", proxyconfig.MaxBytes-3),
		"long quoted scalar":        `a: "` + strings.Repeat(`\t`, proxyconfig.MaxBytes/2-3) + `"`,
		"comments":                  "a: 1\n" + strings.Repeat("#"+strings.Repeat("c", 14)+"\n", proxyconfig.MaxMarks-2),
	}
	fx := newFixture(t, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	ctx := logging.WithLogger(context.Background(), zap.NewNop().Sugar())
	for name, config := range cases {
		if err := proxyconfig.CheckLimits(config); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d, b, resp := measureAdmit(ctx, fx.r, reviewBody(t, podRequest(t, "ml", nil, map[string]string{keys.AnnotationProxyConfig: config})))
		t.Logf("%-26s %5d bytes %4d marks  %10v  %8.1f KiB  patch=%v %q", name, len(config), proxyconfig.CountMarks(config),
			d.Round(time.Microsecond), float64(b)/1024, resp.Patch != nil, resp.Warnings)
		if d > admitTimeBound || b > admitBytesBound {
			t.Errorf("%s: Admit took %v and %d bytes, want ≤ %v and ≤ %d", name, d, b, admitTimeBound, admitBytesBound)
		}
		if resp.Patch == nil {
			t.Errorf("%s: not mutated (warnings %q)", name, resp.Warnings)
		}
	}
}

// realProxyConfig is a large ProxyConfig as users write them (665 bytes, 58
// marks): the limits are 12 and 4 times that.
const realProxyConfig = `# ML training workers: trace a little, keep DNS capture on.
concurrency: 2
terminationDrainDuration: 30s
drainDuration: 45s
tracing:
  sampling: 10.5
  zipkin:
    address: zipkin.istio-system:9411
  custom_tags:
    job:
      environment:
        name: JOB_NAME
proxyMetadata:
  ISTIO_META_DNS_CAPTURE: "true"
  ISTIO_META_DNS_AUTO_ALLOCATE: "true"
  BOOTSTRAP_XDS_AGENT: "true"
  EXIT_ON_ZERO_ACTIVE_CONNECTIONS: "true"
  MINIMUM_DRAIN_DURATION: 5s
proxyStatsMatcher:
  inclusionRegexps:
  - ".*outlier_detection.*"
  - ".*upstream_rq_retry.*"
  - ".*upstream_cx_.*"
  inclusionPrefixes:
  - cluster.outbound
  - listener
gatewayTopology:
  numTrustedProxies: 2
`

// fill is head, unit(0), unit(1)… and tail, with as many units as keep it
// within proxyconfig's limits.
func fill(head string, unit func(int) string, tail string) string {
	var b strings.Builder
	b.WriteString(head)
	for i := 0; ; i++ {
		u := unit(i)
		if proxyconfig.CheckLimits(b.String()+u+tail) != nil {
			break
		}
		b.WriteString(u)
	}
	b.WriteString(tail)
	return b.String()
}

// FuzzAdmitBounds feeds Admit proxy configs made of a head, a unit repeated
// count times and a tail, up to the API server's 256 KiB, so that the fuzzer
// explores large structures (what costs a YAML parser), not only short
// strings. Properties: every Admit allocates at most 1 MiB and takes at
// most 5 ms plus twice the time one scan of the pod's JSON takes
// (admitTimeLimit), allows the pod, and either leaves it unchanged or merges
// the hold the way checkMerged requires.
//
//	go test -run XXX -fuzz '^FuzzAdmitBounds$' -fuzztime 60s -fuzzminimizetime 2s ./webhook/
//
// (Minimizing an interesting input runs it thousands of times; 2 s keeps
// the fuzzer exploring.)
func FuzzAdmitBounds(f *testing.F) {
	seeds := []struct {
		head, unit string
		count      uint32
		tail       string
	}{
		{"a: &a {", "k: 0, ", 40_000, "z: 0}\nb: [*a, *a, *a, *a, *a, *a, *a, *a]\n"},
		{"a: &a [lol, lol]\nb: [", "*a, ", 60_000, "*a]"},
		{"", "k: 1\n", 16_000, ""},
		{"a: ", "[", 9_999, strings.Repeat("]", 9_999)},
		{"a: ", "x", 1 << 18, ""},
		{"a: \"", "\\t", 1 << 17, "\""},
		{"", " a:\n", 100_000, ""},
		{"{", "ab,", 400, "z}"},
		{"{", "\"ab\":1,", 200, "\"z\":1}"},
		{"a: [", "{}, ", 2_000, "{}]"},
		{"# ", "c", 200_000, "\nhold_application_until_proxy_starts: false"},
		{"hold_application_until_proxy_starts: \"", "true", 1, "\""},
		{"holdApplicationUntilProxyStarts: ", "yes", 1, ""},
		{"concurrency: 2\n", "# comment\n", 10, "tracing: {sampling: 1}"},
	}
	for _, s := range seeds {
		f.Add(s.head, s.unit, s.count, s.tail)
	}
	fx := newFixture(f, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	ctx := logging.WithLogger(context.Background(), zap.NewNop().Sugar())
	longest := maxAnnotations - len(keys.AnnotationProxyConfig)
	timeBound := admitTimeBound
	if fl := flag.Lookup("test.fuzz"); fl != nil && fl.Value.String() != "" {
		// -fuzz builds with coverage counters on every branch, which makes
		// Admit about 5 times slower (decoding a 256 KiB pod takes 5 ms);
		// TestAdmitBounds holds the uninstrumented code to 5 ms.
		timeBound *= 5
	}

	f.Fuzz(func(t *testing.T, head, unit string, count uint32, tail string) {
		if len(head)+len(tail) > longest {
			t.Skip("over the API server's limit")
		}
		if len(unit) > 0 {
			count = min(count, uint32((longest-len(head)-len(tail))/len(unit)))
		}
		config := head + strings.Repeat(unit, int(count)) + tail
		req := podRequest(t, "ml", nil, map[string]string{keys.AnnotationProxyConfig: config})
		body := reviewBody(t, req)

		var before, after runtime.MemStats
		var d time.Duration
		var b uint64
		var out []byte
		// The least of up to three runs: the machine's other load only adds.
		for range 3 {
			runtime.ReadMemStats(&before)
			start := time.Now()
			out = reviewOK(t, ctx, fx.r, body)
			d = time.Since(start)
			runtime.ReadMemStats(&after)
			b = after.TotalAlloc - before.TotalAlloc
			if d <= timeBound && b <= admitBytesBound {
				break // the common case: no need to time the JSON
			}
			runtime.GC()
		}
		if limit := admitTimeLimit(body, timeBound); d > limit || b > admitBytesBound {
			t.Fatalf("Admit took %v and %d bytes on a %d-byte config, want ≤ %v and ≤ %d", d, b, len(config), limit, admitBytesBound)
		}
		resp := answer(t, out)
		if !resp.Allowed {
			t.Fatalf("not allowed: %+v", resp)
		}
		if !touchesAnnotations(t, resp.Patch) {
			return
		}
		got := admissiontest.AnnotationsAfter(t, req.Object.Raw, resp.Patch)
		checkMerged(t, sentConfig(t, req.Object.Raw), got[keys.AnnotationProxyConfig])
	})
}
