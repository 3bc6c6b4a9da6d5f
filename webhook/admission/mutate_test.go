package admission

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/webhook/admission/admissiontest"
	"github.com/istio-aux/istio-aux/webhook/proxyconfig"
)

var (
	enabledNS = admissiontest.EnabledNS
	legacyNS  = admissiontest.LegacyNS
)

// applyMutation runs Mutate on the pod's JSON, applies the resulting patch
// to that JSON and returns the annotations of the patched object.
func applyMutation(t testing.TB, raw []byte, nsLabels map[string]string, mode Mode) (Mutation, map[string]string) {
	t.Helper()
	pod, err := DecodePod(raw)
	if err != nil {
		t.Fatalf("DecodePod: %v", err)
	}
	m := Mutate(pod, nsLabels, mode)
	if m.Outcome != Mutated {
		return m, admissiontest.RawAnnotations(t, raw)
	}
	patch, err := patchFor(pod.shape(), m)
	if err != nil {
		t.Fatalf("patchFor: %v", err)
	}
	return m, admissiontest.AnnotationsAfter(t, raw, patch)
}

func TestMutate(t *testing.T) {
	const hold = keys.AnnotationProxyConfig
	other := map[string]string{"team": "ml"}
	type testCase = struct {
		ns          map[string]string
		labels      map[string]string
		annotations map[string]string
		native      bool // pod already carries a native istio-proxy
		hostNetwork bool
		mode        Mode
		outcome     Outcome
		reason      string
		want        map[string]string // the annotations afterwards
	}
	// The rows about proxy.istio.io/config itself are in testdata/merge.json,
	// which test/e2e also runs through istiod.
	tests := map[string]testCase{
		"no annotations at all": {
			ns: enabledNS, outcome: Mutated, reason: ReasonHold,
			want: map[string]string{hold: "holdApplicationUntilProxyStarts: true"},
		},
		"other annotations, no proxy config": {
			ns: enabledNS, annotations: other, outcome: Mutated, reason: ReasonHold,
			want: map[string]string{"team": "ml", hold: "holdApplicationUntilProxyStarts: true"},
		},
		"legacy namespace label": {
			ns: legacyNS, outcome: Mutated, reason: ReasonHold,
			want: map[string]string{hold: "holdApplicationUntilProxyStarts: true"},
		},
		"over the size limit: unchanged with a warning": {
			ns: enabledNS, annotations: map[string]string{hold: "a: " + strings.Repeat("x", proxyconfig.MaxBytes)},
			outcome: Warned, reason: ReasonProxyConfigLimit,
			want: map[string]string{hold: "a: " + strings.Repeat("x", proxyconfig.MaxBytes)},
		},
		"over the structure limit: unchanged with a warning": {
			ns: enabledNS, annotations: map[string]string{hold: "a: [" + strings.Repeat("1,", proxyconfig.MaxMarks) + "1]"},
			outcome: Warned, reason: ReasonProxyConfigLimit,
			want: map[string]string{hold: "a: [" + strings.Repeat("1,", proxyconfig.MaxMarks) + "1]"},
		},
		"opted out by annotation in an enabled namespace": {
			ns: enabledNS, annotations: map[string]string{keys.AnnotationEnabled: "false"},
			outcome: Skipped, reason: ReasonNotOptedIn,
			want: map[string]string{keys.AnnotationEnabled: "false"},
		},
		"opted in by pod label in an unlabelled namespace": {
			labels:  map[string]string{keys.LabelEnabled: "true"},
			outcome: Mutated, reason: ReasonHold,
			want: map[string]string{hold: "holdApplicationUntilProxyStarts: true"},
		},
		"not opted in": {
			ns: map[string]string{"istio-injection": "enabled"}, annotations: other,
			outcome: Skipped, reason: ReasonNotOptedIn, want: other,
		},
		"inject=false label": {
			ns: enabledNS, labels: map[string]string{keys.KeyInject: "false"},
			outcome: Skipped, reason: ReasonNoInjection,
		},
		"inject=false annotation": {
			ns: enabledNS, annotations: map[string]string{keys.KeyInject: "false"},
			outcome: Skipped, reason: ReasonNoInjection,
			want: map[string]string{keys.KeyInject: "false"},
		},
		"inject=off annotation (any non-true value)": {
			ns: enabledNS, annotations: map[string]string{keys.KeyInject: "Off"},
			outcome: Skipped, reason: ReasonNoInjection,
			want: map[string]string{keys.KeyInject: "Off"},
		},
		"hostNetwork pod": {
			ns: enabledNS, hostNetwork: true,
			outcome: Skipped, reason: ReasonNoInjection,
		},
		"inject label true wins over annotation false": {
			ns: enabledNS, labels: map[string]string{keys.KeyInject: "true"}, annotations: map[string]string{keys.KeyInject: "false"},
			outcome: Mutated, reason: ReasonHold,
			want: map[string]string{keys.KeyInject: "false", hold: "holdApplicationUntilProxyStarts: true"},
		},
		"pod already has a native istio-proxy": {
			ns: enabledNS, native: true,
			outcome: Skipped, reason: ReasonNativeSidecar,
		},
		"native mode sets the annotation": {
			ns: enabledNS, mode: ModeNative, annotations: other,
			outcome: Mutated, reason: ReasonNative,
			want: map[string]string{"team": "ml", keys.AnnotationNativeSidecar: "true"},
		},
		"native mode keeps the user's value": {
			ns: enabledNS, mode: ModeNative, annotations: map[string]string{keys.AnnotationNativeSidecar: "false"},
			outcome: Skipped, reason: ReasonUserNative,
			want: map[string]string{keys.AnnotationNativeSidecar: "false"},
		},
		"native mode leaves proxy config alone": {
			ns: enabledNS, mode: ModeNative, annotations: map[string]string{hold: "concurrency: 2"},
			outcome: Mutated, reason: ReasonNative,
			want: map[string]string{hold: "concurrency: 2", keys.AnnotationNativeSidecar: "true"},
		},
		"native mode, not opted in": {
			mode: ModeNative, outcome: Skipped, reason: ReasonNotOptedIn,
		},
	}
	for _, r := range mergeRows(t) {
		if _, dup := tests[r.Name]; dup {
			t.Fatalf("row %q twice", r.Name)
		}
		tc := testCase{ns: enabledNS, outcome: r.Outcome, reason: r.reasonText(t), want: map[string]string{hold: r.Want}}
		if r.Config != nil {
			tc.annotations = map[string]string{hold: *r.Config}
		}
		tests[r.Name] = tc
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod := admissiontest.Pod(tc.labels, tc.annotations)
			if tc.native {
				always := corev1.ContainerRestartPolicyAlways
				pod.Spec.InitContainers = []corev1.Container{{Name: keys.ProxyContainer, RestartPolicy: &always}}
			}
			pod.Spec.HostNetwork = tc.hostNetwork
			mode := tc.mode
			if mode == "" {
				mode = ModeHold
			}
			before := maps.Clone(pod.Annotations)
			raw, err := json.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			m, got := applyMutation(t, raw, tc.ns, mode)
			if m.Outcome != tc.outcome || m.Reason != tc.reason {
				t.Errorf("outcome = %s (%s), want %s (%s)", m.Outcome, m.Reason, tc.outcome, tc.reason)
			}
			if (m.Outcome == Warned) != (m.Warning != "") {
				t.Errorf("warning %q with outcome %s", m.Warning, m.Outcome)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("annotations after =\n%#v\nwant\n%#v", got, tc.want)
			}
			if !maps.Equal(pod.Annotations, before) {
				t.Errorf("Mutate modified its input: %#v", pod.Annotations)
			}
		})
	}
}

// The JSON patch must reach the object whatever shape its metadata has.
func TestAnnotationPatchShapes(t *testing.T) {
	tests := map[string]struct {
		raw  string
		want string // the single patch operation's path
	}{
		"no metadata":          {`{"spec":{}}`, "/metadata"},
		"null metadata":        {`{"metadata":null}`, "/metadata"},
		"no annotations":       {`{"metadata":{"name":"p"}}`, "/metadata/annotations"},
		"null annotations":     {`{"metadata":{"annotations":null}}`, "/metadata/annotations"},
		"empty annotations":    {`{"metadata":{"annotations":{}}}`, "/metadata/annotations/proxy.istio.io~1config"},
		"existing annotations": {`{"metadata":{"annotations":{"proxy.istio.io/config":"concurrency: 1"}}}`, "/metadata/annotations/proxy.istio.io~1config"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m, got := applyMutation(t, []byte(tc.raw), enabledNS, ModeHold)
			if m.Outcome != Mutated || !strings.Contains(got[keys.AnnotationProxyConfig], "holdApplicationUntilProxyStarts: true") {
				t.Fatalf("outcome %s, annotations %#v", m.Outcome, got)
			}
			pod, _ := DecodePod([]byte(tc.raw))
			patch, _ := patchFor(pod.shape(), m)
			var ops []map[string]any
			if err := json.Unmarshal(patch, &ops); err != nil || len(ops) != 1 || ops[0]["path"] != tc.want {
				t.Errorf("patch %s, want one operation on %s", patch, tc.want)
			}
		})
	}
}

func TestDecodePodRejects(t *testing.T) {
	for _, raw := range []string{``, `null`, `[]`, `"pod"`, `{"metadata":"x"}`, `{"metadata":{"annotations":{"proxy.istio.io/config":1}}}`, `{} {}`, `{"spec":`} {
		if _, err := DecodePod([]byte(raw)); err == nil {
			t.Errorf("DecodePod(%q) = nil error", raw)
		}
	}
}

// DecodePod reads only the labels and annotations Mutate reads (what it
// does not read, it does not check either: the API server decoded the pod
// before it called), and the proxy config only when it can be within
// proxyconfig's size limit.
func TestDecodePodAnnotations(t *testing.T) {
	raw := `{"metadata":{"labels":{"team":1,"istio-aux.dev/enabled":"true"},"annotations":{"team":{"not":"read"},"sidecar.istio.io/inject":"tr\u0075e",` +
		`"istio-aux.dev/enabled":null,"proxy.istio.io/config":"` + strings.Repeat(`\u0026`, 3*proxyconfig.MaxBytes) + `"}}}`
	pod, err := DecodePod([]byte(raw))
	if err != nil || pod.shape() != (shape{metadata: true, annotations: true, labels: true}) {
		t.Fatalf("DecodePod: %v, %+v", err, pod)
	}
	a := pod.Metadata.Annotations
	if c := a.ProxyConfig; !c.tooLong || c.text != "" {
		t.Errorf("proxy config of %d bytes unquoted (tooLong %v), want none: over the limit", len(c.text), c.tooLong)
	}
	if a.Inject != (value{"true", true}) || a.Enabled != (value{"", true}) || a.Native.set {
		t.Errorf("annotations = %+v, want inject true, enabled null (set, empty), no nativeSidecar", *a)
	}
	labels, annotations := pod.optIn()
	if want := map[string]string{keys.LabelEnabled: "true"}; !maps.Equal(labels, want) || !maps.Equal(annotations, map[string]string{keys.AnnotationEnabled: ""}) {
		t.Errorf("opt-in labels %v, annotations %v", labels, annotations)
	}
	if m := Mutate(pod, nil, ModeHold); m.Reason != ReasonProxyConfigLimit || !strings.Contains(m.Warning, "longer than the 8192 bytes") {
		t.Errorf("Mutate = %+v, want the size limit's warning", m)
	}
}

func TestEscapePointer(t *testing.T) {
	for in, want := range map[string]string{
		"proxy.istio.io/config": "proxy.istio.io~1config",
		"a~1b":                  "a~01b",
		"~/":                    "~0~1",
	} {
		if got := escapePointer(in); got != want {
			t.Errorf("escapePointer(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNewConfigFromConfigMap(t *testing.T) {
	tests := map[string]struct {
		data    map[string]string
		want    Mode
		wantErr bool
	}{
		"missing key": {data: nil, want: ModeHold},
		"hold":        {data: map[string]string{"mode": "hold"}, want: ModeHold},
		"native":      {data: map[string]string{"mode": " Native "}, want: ModeNative},
		"invalid":     {data: map[string]string{"mode": "holdd"}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := NewConfigFromConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: names.ConfigMap}, Data: tc.data})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && cfg.Mode != tc.want {
				t.Errorf("mode = %s, want %s", cfg.Mode, tc.want)
			}
		})
	}
}

// TestMutateLabelsRunToCompletionPods: every opted-in pod Istio injects
// whose containers are not restarted gets keys.LabelWatched, whatever
// becomes of its hold, so that the bridge's cluster-wide watch sees it; no
// other pod does.
func TestMutateLabelsRunToCompletionPods(t *testing.T) {
	tests := map[string]struct {
		raw  string
		ns   map[string]string
		want bool
	}{
		"Never":                  {`{"spec":{"restartPolicy":"Never"}}`, enabledNS, true},
		"OnFailure":              {`{"spec":{"restartPolicy":"OnFailure"}}`, enabledNS, true},
		"Always":                 {`{"spec":{"restartPolicy":"Always"}}`, enabledNS, false},
		"no policy (Always)":     {`{"spec":{}}`, enabledNS, false},
		"not opted in":           {`{"spec":{"restartPolicy":"Never"}}`, nil, false},
		"opted out by its label": {`{"metadata":{"labels":{"istio-aux.dev/enabled":"false"}},"spec":{"restartPolicy":"Never"}}`, enabledNS, false},
		"opted in by its label":  {`{"metadata":{"labels":{"istio-aux.dev/enabled":"true"}},"spec":{"restartPolicy":"Never"}}`, nil, true},
		"no injection":           {`{"metadata":{"labels":{"sidecar.istio.io/inject":"false"}},"spec":{"restartPolicy":"Never"}}`, enabledNS, false},
		"labelled already":       {`{"metadata":{"labels":{"istio-aux.dev/watched":"true"}},"spec":{"restartPolicy":"Never"}}`, enabledNS, false},
		"user's hold":            {`{"metadata":{"annotations":{"proxy.istio.io/config":"holdApplicationUntilProxyStarts: true"}},"spec":{"restartPolicy":"Never"}}`, enabledNS, true},
		"config not rewritten":   {`{"metadata":{"annotations":{"proxy.istio.io/config":"a: &x 1\nb: *x"}},"spec":{"restartPolicy":"Never"}}`, enabledNS, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod, err := DecodePod([]byte(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			m := Mutate(pod, tc.ns, ModeHold)
			if m.Label != tc.want {
				t.Fatalf("Label = %v, want %v (outcome %s, %s)", m.Label, tc.want, m.Outcome, m.Reason)
			}
			patch, err := patchFor(pod.shape(), m)
			if err != nil {
				t.Fatal(err)
			}
			got, want := labelsAfter(t, []byte(tc.raw), patch)[keys.LabelWatched] == "true", tc.want || pod.watched()
			if got != want {
				t.Errorf("labelled after the patch: %v, want %v (patch %s)", got, want, patch)
			}
		})
	}
}

// labelsAfter applies a patch to raw and returns the object's labels.
func labelsAfter(t testing.TB, raw, patch []byte) map[string]string {
	t.Helper()
	if patch != nil {
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			t.Fatalf("patch %s: %v", patch, err)
		}
		if raw, err = p.Apply(raw); err != nil {
			t.Fatalf("applying %s: %v", patch, err)
		}
	}
	var v struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v.Metadata.Labels
}
