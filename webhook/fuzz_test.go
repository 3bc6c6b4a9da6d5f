package webhook

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"go.uber.org/zap"
	yaml "go.yaml.in/yaml/v3"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/logging"
)

// FuzzAdmit feeds Admit random objects and random proxy.istio.io/config
// values. Properties: it never panics and always allows; a returned patch
// applies to the object it was computed for and changes only our
// annotation; a merged proxy config is a YAML mapping that still holds every
// original key with its value, plus holdApplicationUntilProxyStarts.
//
//	go test -fuzz=FuzzAdmit -fuzztime=60s ./webhook/
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
	}
	for _, s := range seeds {
		f.Add([]byte(s.raw), s.config, s.native)
	}
	fx := newFixture(f, nil, namespace("ml", map[string]string{keys.LabelEnabled: "true"}))
	// *F's logger must not be used from the fuzz target.
	ctx := logging.WithLogger(context.Background(), zap.NewNop().Sugar())

	f.Fuzz(func(t *testing.T, raw []byte, config string, native bool) {
		mode := ModeHold
		if native {
			mode = ModeNative
		}
		fx.r.config.Store(&Config{Mode: mode})

		// 1. The random object as it comes.
		checkAdmit(ctx, t, fx.r, raw)

		// 2. The random config on a pod that is otherwise whatever the
		// random object decodes to (or a fresh pod).
		pod, _, err := decodePod(raw)
		if err != nil {
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
		if !patched || mode != ModeHold {
			return
		}
		// What the pod really carries: JSON turns invalid UTF-8 into U+FFFD.
		sent, _, err := decodePod(podRaw)
		if err != nil {
			t.Fatal(err)
		}
		config = sent.Annotations[keys.AnnotationProxyConfig]
		var orig map[string]any
		if strings.TrimSpace(config) == "" {
			// Whitespace only: replaced by the key alone.
		} else if err := yaml.Unmarshal([]byte(config), &orig); err != nil {
			t.Fatalf("merged a config that does not parse (%v): %q", err, config)
		}
		var merged map[string]any
		if err := yaml.Unmarshal([]byte(after[keys.AnnotationProxyConfig]), &merged); err != nil {
			t.Fatalf("merged config is not valid YAML: %v\n%q", err, after[keys.AnnotationProxyConfig])
		}
		if merged[KeyHold] != true {
			t.Fatalf("merged config lacks %s: true: %q", KeyHold, after[keys.AnnotationProxyConfig])
		}
		for k, v := range orig {
			if !sameYAML(t, merged[k], v) {
				t.Fatalf("key %q changed from %#v to %#v\nbefore %q\nafter %q", k, v, merged[k], config, after[keys.AnnotationProxyConfig])
			}
		}
	})
}

// checkAdmit runs Admit on raw and checks the response; it returns the
// annotations after the patch and whether there was one.
func checkAdmit(ctx context.Context, t *testing.T, r *reconciler, raw []byte) (map[string]string, bool) {
	t.Helper()
	req := podRequest(t, "ml", nil, nil)
	req.Object = runtime.RawExtension{Raw: raw}
	resp := r.Admit(ctx, req)
	if resp == nil || !resp.Allowed {
		t.Fatalf("not allowed: %+v", resp)
	}
	if resp.Patch == nil {
		return nil, false
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v", resp.PatchType)
	}
	before, _, err := decodePod(raw)
	if err != nil {
		t.Fatalf("patched an undecodable object: %v", err)
	}
	after := annotationsAfter(t, raw, resp.Patch)
	changed := 0
	for k, v := range after {
		if old, ok := before.Annotations[k]; !ok || old != v {
			changed++
			if k != keys.AnnotationProxyConfig && k != keys.AnnotationNativeSidecar {
				t.Fatalf("patch changed annotation %q", k)
			}
		}
	}
	if changed != 1 || len(after) < len(before.Annotations) {
		t.Fatalf("patch changed %d annotations (before %v, after %v)", changed, before.Annotations, after)
	}
	return after, true
}

// sameYAML compares decoded YAML values by their encoding (NaN != NaN).
func sameYAML(t *testing.T, a, b any) bool {
	ea, err1 := yaml.Marshal(a)
	eb, err2 := yaml.Marshal(b)
	if err1 != nil || err2 != nil {
		return reflect.DeepEqual(a, b)
	}
	return string(ea) == string(eb)
}
