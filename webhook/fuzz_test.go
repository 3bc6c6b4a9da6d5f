package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"go.uber.org/zap"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/logging"
	kjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/webhook/admission"
	"github.com/istio-aux/istio-aux/webhook/admission/admissiontest"
	"github.com/istio-aux/istio-aux/webhook/proxyconfig"
)

// FuzzAdmit feeds Admit random objects and random proxy.istio.io/config
// values. Properties: it never panics and always allows; a returned patch
// applies to the object it was computed for and changes only our
// annotation; a merged proxy config is the user's text with one insertion,
// and Istio reads it as the user's fields plus holdApplicationUntilProxyStarts
// (checkMerged).
//
//	go test -run XXX -fuzz '^FuzzAdmit$' -fuzztime 60s ./webhook/
func FuzzAdmit(f *testing.F) {
	seeds := []struct {
		raw    string
		config string
		native bool
	}{
		{`{"metadata":{"name":"p","annotations":{"team":"ml"}},"spec":{"containers":[{"name":"app"}]}}`, "", false},
		{`{"metadata":{"name":"p"}}`, "concurrency: 2\ntracing:\n  sampling: 10\n", false},
		{`{}`, "holdApplicationUntilProxyStarts: false", false},
		{`{"metadata":null}`, "# comment\n", false},
		{`{"metadata":{"annotations":null}}`, "{concurrency: 2}", true},
		{`{"metadata":{"annotations":{"proxy.istio.io/config":"a: 1"}}}`, "a: [1", false},
		{`{"metadata":{"labels":{"sidecar.istio.io/inject":"false"}}}`, "- a\n- b", false},
		{`{"spec":{"initContainers":[{"name":"istio-proxy","restartPolicy":"Always"}]}}`, "a: 1\n---\nb: 2", false},
		{`{"Metadata":{"annotations":{"x":"y"}}}`, "a: &x 1\nb: *x\n", false},
		{`[]`, "<<: {holdApplicationUntilProxyStarts: true}", false},
		{`null`, "a: 1\na: 2", false},
		{`{"metadata":{"annotations":{"a~1b":"c","d/e":"f"}}}`, "x: .nan\n", true},
		{`{"metadata":`, "\t", false},
		{`{}`, "hold_application_until_proxy_starts: false", false},
		{`{}`, "hold_application_until_proxy_starts: \"true\"\nconcurrency: 2", false},
		{`{}`, "{\"holdApplicationUntilProxyStarts\": \"true\"}", false},
		{`{}`, "holdApplicationUntilProxyStarts: yes", false},
		{`{}`, "{\n  a: 1, # c\n  b: \"}\" # d\n} # e\n", false},
		{`{}`, "a: |\n  text", false},
		{`{}`, "  a: 1\n  b: {c: [d]}\n...\n", false},
	}
	for _, s := range seeds {
		f.Add([]byte(s.raw), s.config, s.native)
	}
	fx := newFixture(f, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	// *F's logger must not be used from the fuzz target.
	ctx := logging.WithLogger(context.Background(), zap.NewNop().Sugar())

	f.Fuzz(func(t *testing.T, raw []byte, config string, native bool) {
		mode := admission.ModeHold
		if native {
			mode = admission.ModeNative
		}
		fx.r.config.Store(&admission.Config{Mode: mode})

		// 1. The random object as it comes.
		checkAdmit(ctx, t, fx.r, raw)

		// 2. The random config on a pod that is otherwise whatever the
		// random object decodes to (or a fresh pod).
		var pod *corev1.Pod
		if kjson.UnmarshalCaseSensitivePreserveInts(raw, &pod) != nil || pod == nil {
			pod = &corev1.Pod{}
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[keys.AnnotationProxyConfig] = config
		podRaw, err := json.Marshal(pod)
		if err != nil {
			t.Skip("not marshallable:", err)
		}
		after, patched := checkAdmit(ctx, t, fx.r, podRaw)
		if !patched || mode != admission.ModeHold {
			return
		}
		checkMerged(t, sentConfig(t, podRaw), after[keys.AnnotationProxyConfig])
	})
}

// sentConfig is the proxy config a pod's JSON really carries (JSON turns
// invalid UTF-8 into U+FFFD).
func sentConfig(t *testing.T, raw []byte) string {
	t.Helper()
	var pod corev1.Pod
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &pod); err != nil {
		t.Fatal(err)
	}
	return pod.Annotations[keys.AnnotationProxyConfig]
}

// checkMerged checks a proxy config that Admit merged the hold into: it is
// the user's text with one insertion (a blank config is replaced, trailing
// line breaks after comments may fold), and Istio's reader (sigs.k8s.io/yaml,
// YAML 1.1, to JSON) reads it as the user's fields, each with the same value,
// plus holdApplicationUntilProxyStarts: true.
func checkMerged(t *testing.T, config, merged string) {
	t.Helper()
	if strings.TrimSpace(config) != "" {
		prefix := 0
		for prefix < len(config) && prefix < len(merged) && config[prefix] == merged[prefix] {
			prefix++
		}
		suffix := 0
		for suffix < len(config)-prefix && suffix < len(merged)-prefix && config[len(config)-1-suffix] == merged[len(merged)-1-suffix] {
			suffix++
		}
		inserted := prefix+suffix >= len(config) || prefix >= len(strings.TrimRight(config, "\n"))
		if !inserted || !strings.Contains(merged[prefix:len(merged)-suffix], proxyconfig.KeyHold) {
			t.Fatalf("merged config is not the user's text plus one insertion:\nbefore %q\nafter  %q", config, merged)
		}
	}
	got := istioReads(t, merged)
	if got == nil {
		t.Fatalf("Istio cannot read the merged config %q (from %q)", merged, config)
	}
	if string(got[proxyconfig.KeyHold]) != "true" {
		t.Fatalf("merged config lacks %s: true: %q", proxyconfig.KeyHold, merged)
	}
	delete(got, proxyconfig.KeyHold)
	want := map[string]json.RawMessage{}
	if strings.TrimSpace(config) != "" {
		if want = istioReads(t, config); want == nil {
			// Istio rejects the user's config (a YAML 1.2 reader took it):
			// nothing to compare with.
			return
		}
	}
	if !maps.EqualFunc(got, want, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
		t.Fatalf("Istio reads the merged config differently:\nbefore %q\n  %s\nafter  %q\n  %s", config, want, merged, got)
	}
}

// istioReads is the top level of a proxy config as Istio reads it, or nil
// when Istio cannot: sigs.k8s.io/yaml.YAMLToJSON, then a JSON object (see
// holdvalue.go).
func istioReads(t *testing.T, config string) map[string]json.RawMessage {
	t.Helper()
	js, err := sigsyaml.YAMLToJSON([]byte(config))
	if err != nil {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(js, &fields); err != nil || fields == nil {
		return nil
	}
	return fields
}

// checkAdmit answers an AdmissionReview of raw and checks the response; it
// returns the annotations after the patch and whether there was one. A
// review that is not JSON (raw is not) must be refused, not answered.
func checkAdmit(ctx context.Context, t *testing.T, r *reconciler, raw []byte) (map[string]string, bool) {
	t.Helper()
	req := podRequest(t, "ml", nil, nil)
	req.Object = runtime.RawExtension{Raw: raw}
	out, err := r.Review(ctx, reviewBody(t, req))
	if !json.Valid(raw) {
		if err == nil {
			t.Fatalf("answered a review whose object is not JSON: %s", out)
		}
		return nil, false
	}
	if err != nil {
		t.Fatalf("refused a review: %v", err)
	}
	resp := answer(t, out)
	if !resp.Allowed {
		t.Fatalf("not allowed: %+v", resp)
	}
	if resp.Patch == nil {
		return nil, false
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v", resp.PatchType)
	}
	if _, err := admission.DecodePod(raw); err != nil {
		t.Fatalf("patched an undecodable object: %v", err)
	}
	before := admissiontest.RawAnnotations(t, raw)
	after := admissiontest.AnnotationsAfter(t, raw, resp.Patch)
	changed := 0
	for k, v := range after {
		if old, ok := before[k]; !ok || old != v {
			changed++
			if k != keys.AnnotationProxyConfig && k != keys.AnnotationNativeSidecar {
				t.Fatalf("patch changed annotation %q", k)
			}
		}
	}
	if changed != 1 || len(after) < len(before) {
		t.Fatalf("patch changed %d annotations (before %v, after %v)", changed, before, after)
	}
	return after, true
}
