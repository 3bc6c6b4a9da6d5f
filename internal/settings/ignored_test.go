package settings

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"knative.dev/pkg/configmap"
	"sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// shippedFile is config-istio-aux as config/ ships it.
const shippedFile = "../../config/300-config-istio-aux.yaml"

func shippedConfigMap(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	b, err := os.ReadFile(shippedFile)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	return &cm
}

// TestShippedConfigMap: the ConfigMap of config/ says nothing Ignored
// would warn of; its annotation is the checksum of its _example; its
// _example documents every key, with values the components accept, read
// alike by YAML and by exampleSettings, and equal to shippedExample.
func TestShippedConfigMap(t *testing.T) {
	cm := shippedConfigMap(t)
	example := cm.Data[ExampleKey]
	if got, want := cm.Annotations[ExampleChecksumAnnotation], configmap.Checksum(example); got != want {
		t.Errorf("%s: annotation %s is %q, want %q, the checksum of its _example (write it there)",
			shippedFile, ExampleChecksumAnnotation, got, want)
	}
	if w := Ignored(cm); w != nil {
		t.Errorf("the shipped ConfigMap warns: %q", w)
	}
	var parsed map[string]string
	if err := yaml.Unmarshal([]byte(example), &parsed); err != nil {
		t.Fatalf("_example is not YAML of strings: %v", err)
	}
	if scanned := exampleSettings(example); !maps.Equal(scanned, parsed) {
		t.Errorf("exampleSettings read %q, YAML reads %q", scanned, parsed)
	}
	if !maps.Equal(parsed, shippedExample) {
		t.Errorf("_example sets %q, shippedExample says %q", parsed, shippedExample)
	}
	if documented := slices.Sorted(maps.Keys(parsed)); !slices.Equal(documented, slices.Sorted(slices.Values(Keys))) {
		t.Errorf("_example documents %q, the keys read are %q", documented, Keys)
	}
	if _, errs := Apply(Defaults(), Defaults(), parsed); errs != nil {
		t.Errorf("_example's values are refused: %v", errs)
	}
	if _, errs := Apply(Defaults(), Defaults(), cm.Data); errs != nil {
		t.Errorf("the shipped values are refused: %v", errs)
	}
}

// edited is the shipped ConfigMap whose _example has old replaced by new.
func edited(t *testing.T, old, new string) *corev1.ConfigMap {
	t.Helper()
	cm := shippedConfigMap(t)
	if !strings.Contains(cm.Data[ExampleKey], old) {
		t.Fatalf("_example has no %q", old)
	}
	cm.Data[ExampleKey] = strings.Replace(cm.Data[ExampleKey], old, new, 1)
	return cm
}

func TestIgnored(t *testing.T) {
	many := map[string]string{}
	for i := range 100 {
		many[fmt.Sprintf("key-%03d", i)] = "x"
	}
	for name, tc := range map[string]struct {
		cm   func(*testing.T) *corev1.ConfigMap
		says []string // a part of each warning, in order; nil: no warning
	}{
		"known keys": {func(*testing.T) *corev1.ConfigMap {
			return configMap(map[string]string{names.KeyMode: "native", KeySidecars: "a"})
		}, nil},
		"no ConfigMap":  {func(*testing.T) *corev1.ConfigMap { return nil }, nil},
		"shipped as is": {shippedConfigMap, nil},
		"misspelt keys": {func(*testing.T) *corev1.ConfigMap {
			return configMap(map[string]string{"sidecar": "a", "quit_command": "b", "Mode": "native", "resync": "9m", "nats-url": "", "colour": "red"})
		}, []string{`keys "Mode" (did you mean "mode"?), "colour", "quit_command" (did you mean "quit-command"?), "resync" (did you mean "resync-period"?), "sidecar" (did you mean "sidecars"?); the keys read are mode, sidecars, quit-command, quit-native, resync-period, nats-url`}},
		"a binaryData key": {func(*testing.T) *corev1.ConfigMap {
			cm := configMap(nil)
			cm.BinaryData = map[string][]byte{"sidecars": []byte("a")}
			return cm
		}, []string{`key "sidecars" in binaryData (settings are data);`}},
		"100 unknown keys, 5 named": {func(*testing.T) *corev1.ConfigMap { return configMap(many) },
			[]string{`keys "key-000", "key-001", "key-002", "key-003", "key-004", and 95 more;`}},
		"an edited _example": {func(t *testing.T) *corev1.ConfigMap { return edited(t, `mode: "hold"`, `mode: "native"`) },
			[]string{`, and no component reads it: to set mode: "native", copy it above _example as a key of its own`}},
		"an edited _example, also set above": {func(t *testing.T) *corev1.ConfigMap {
			cm := edited(t, `resync-period: "5m"`, `resync-period: "10m"`)
			cm.Data[KeyResync] = "10m"
			return cm
		}, []string{"and no component reads it: a setting is a key of its own, above _example"}},
		"comments edited": {func(t *testing.T) *corev1.ConfigMap { return edited(t, "EXAMPLE", "SAMPLE") },
			[]string{"a setting is a key of its own"}},
		"edited, and a key misspelt": {func(t *testing.T) *corev1.ConfigMap {
			cm := edited(t, `sidecars: "vault-agent,fluent-bit"`, `sidecars: 'vault-agent,istio-init' # ours`)
			cm.Data["quitnative"] = "true"
			return cm
		}, []string{`key "quitnative" (did you mean "quit-native"?)`, `to set sidecars: "vault-agent,istio-init", copy it`}},
		"no annotation: not checked": {func(t *testing.T) *corev1.ConfigMap {
			cm := edited(t, `mode: "hold"`, `mode: "native"`)
			delete(cm.Annotations, ExampleChecksumAnnotation)
			return cm
		}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			got := Ignored(tc.cm(t))
			if len(got) != len(tc.says) {
				t.Fatalf("Ignored = %q, want %d warnings saying %q", got, len(tc.says), tc.says)
			}
			for i, w := range got {
				if !strings.Contains(w, tc.says[i]) || len(w) > 1024 {
					t.Errorf("warning %q, want one of at most 1 KiB saying %q", w, tc.says[i])
				}
			}
		})
	}
}

func TestLikelyKey(t *testing.T) {
	for k, want := range map[string]string{
		"sidecar": KeySidecars, "side-cars": KeySidecars, "SIDECARS": KeySidecars, "quit.native": KeyQuitNative,
		"quitcommand": KeyQuitCommand, "resync": KeyResync, "resyncperiod": KeyResync, "nats_url": KeyNATSURL,
		"node": names.KeyMode, "colour": "", "verbose": "", strings.Repeat("s", 100): "",
	} {
		if got := likelyKey(k); got != want {
			t.Errorf("likelyKey(%.20q) = %q, want %q", k, got, want)
		}
	}
}

// TestFollowerWarnsOfIgnored: a misspelt key and an edited _example are
// said in a Warning Event SettingsIgnored on the ConfigMap, naming what
// was most likely meant, once per change; the known keys still apply.
// (Before, both were ignored without a word.)
func TestFollowerWarnsOfIgnored(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	f := &Follower{Component: "test", Instance: "pod-1", Base: Defaults(), Recorder: rec}
	f.cur = f.Base
	events := func() (out []string) { // the warnings
		for len(rec.Events) > 0 {
			if e := <-rec.Events; strings.HasPrefix(e, corev1.EventTypeWarning) {
				out = append(out, e)
			}
		}
		return out
	}
	misspelt := configMap(map[string]string{"sidecar": "vault-agent", "quit-native": "true"})
	f.Observe(misspelt)
	if got := f.Current(); !got.Decision.QuitNative || got.Decision.ExtraSidecars != nil {
		t.Errorf("settings %v: want quit-native applied, sidecars not", got)
	}
	if got := events(); len(got) != 1 || !strings.HasPrefix(got[0], "Warning SettingsIgnored test: ") || !strings.Contains(got[0], `"sidecar" (did you mean "sidecars"?)`) {
		t.Errorf("events %q, want one Warning SettingsIgnored naming sidecar and sidecars", got)
	}
	f.Observe(misspelt.DeepCopy()) // a relist
	if got := events(); len(got) != 0 {
		t.Errorf("the same ConfigMap again: events %q, want none", got)
	}

	cm := shippedConfigMap(t)
	cm.Data["_example"] = strings.Replace(cm.Data["_example"], `quit-native: "false"`, `quit-native: "true"`, 1)
	f.Observe(cm)
	if got := events(); len(got) != 1 || !strings.HasPrefix(got[0], "Warning SettingsIgnored test: ") || !strings.Contains(got[0], `to set quit-native: "true"`) {
		t.Errorf("events %q, want one Warning SettingsIgnored naming quit-native: \"true\"", got)
	}
	if f.Current().Decision.QuitNative {
		t.Error("the edited _example was applied")
	}
	f.Observe(shippedConfigMap(t))
	if got := events(); len(got) != 0 {
		t.Errorf("the shipped ConfigMap: events %q, want none", got)
	}
}
