package proxyconfig

import (
	"errors"
	"strings"
	"testing"
)

// What the user reads when the pod is left unchanged: the problem, named.
func TestMergeHoldWarnings(t *testing.T) {
	tests := map[string]struct {
		config string
		want   string // the whole message, or a part of it when part is set
		part   bool
		limit  bool // a *LimitError
	}{
		"hold as the string true": {
			config: `holdApplicationUntilProxyStarts: "true"`,
			want:   `proxy.istio.io/config: holdApplicationUntilProxyStarts is the string "true"; Istio rejects it: write true without quotes`,
		},
		"proto spelling as the string false": {
			config: "hold_application_until_proxy_starts: 'false'\n",
			want:   `proxy.istio.io/config: hold_application_until_proxy_starts is the string "false"; Istio rejects it: write false without quotes`,
		},
		"hold as a number": {
			config: "holdApplicationUntilProxyStarts: 1",
			want:   "proxy.istio.io/config: holdApplicationUntilProxyStarts is 1, not true or false; Istio rejects it: write true or false",
		},
		"hold as a word": {
			config: "holdApplicationUntilProxyStarts: enabled",
			want:   "proxy.istio.io/config: holdApplicationUntilProxyStarts is enabled, not true or false; Istio rejects it: write true or false",
		},
		"hold as a list": {
			config: "holdApplicationUntilProxyStarts: [true]",
			want:   "proxy.istio.io/config: holdApplicationUntilProxyStarts is a list; Istio rejects it: write true or false",
		},
		"hold tagged as a string": {
			config: "holdApplicationUntilProxyStarts: !!str true",
			want:   `proxy.istio.io/config: holdApplicationUntilProxyStarts is "true" tagged !!str; Istio rejects it: write true or false`,
		},
		// Istio reads the camelCase key when both are there.
		"both spellings, camelCase rejected": {
			config: "hold_application_until_proxy_starts: true\nholdApplicationUntilProxyStarts: \"x\"\n",
			want:   `proxy.istio.io/config: holdApplicationUntilProxyStarts is the string "x"; Istio rejects it: write true or false`,
		},
		"invalid YAML": {
			config: "concurrency: [2",
			want:   "proxy.istio.io/config is not valid YAML (yaml: line 1: did not find expected ',' or ']'); Istio rejects it",
		},
		"a list": {
			config: "- concurrency: 2",
			want:   "proxy.istio.io/config is a list, not a mapping of ProxyConfig fields; Istio rejects it",
		},
		"a scalar": {
			config: "concurrency",
			want:   `proxy.istio.io/config is the scalar "concurrency", not a mapping of ProxyConfig fields; Istio rejects it`,
		},
		"null": {
			config: "~",
			want:   "proxy.istio.io/config is null, not a mapping; istio-aux adds nothing to it: write {} or remove it",
		},
		"two documents": {
			config: "concurrency: 2\n---\nconcurrency: 3\n",
			want:   "proxy.istio.io/config holds more than one YAML document (line 2); istio-aux does not rewrite it: remove the ---",
		},
		"repeated top-level key": {
			config: "concurrency: 2\ntracing: {}\nconcurrency: 3\n",
			want:   "proxy.istio.io/config sets concurrency twice (lines 1 and 3); istio-aux does not rewrite it: keep one",
		},
		"anchor": {
			config: "a: &lol [lol]\n",
			want:   "proxy.istio.io/config uses the YAML anchor &lol (line 1); istio-aux does not expand anchors, aliases or merge keys: write the values out",
		},
		"merge key": {
			config: "tracing:\n  <<: {sampling: 1}\n",
			want:   "proxy.istio.io/config uses the YAML merge key << (line 2); istio-aux does not expand anchors, aliases or merge keys: write the values out",
		},
		"null key": {
			config: "~: 1\n",
			want:   "proxy.istio.io/config has a null mapping key (line 1); Istio rejects it",
		},
		"list as a key": {
			config: "? [a]\n: 1\n",
			want:   "proxy.istio.io/config has a mapping key that is a list (line 1); Istio rejects it",
		},
		"document end marker": {
			config: "concurrency: 2\n...\n",
			want:   "proxy.istio.io/config could not be rewritten without changing it; istio-aux left it as it is: add holdApplicationUntilProxyStarts: true yourself",
		},
		"too many bytes": {
			config: "a: " + strings.Repeat("x", MaxBytes-2),
			want:   "proxy.istio.io/config is longer than the 8192 bytes (8 KiB) istio-aux reads", limit: true,
		},
		"too much structure": {
			config: strings.Repeat("a\n", MaxMarks+1),
			want:   "proxy.istio.io/config has 257 line breaks and YAML indicators (, : [ ] { } - ?), over the 256 istio-aux reads", limit: true,
		},
		"long names are clipped": {
			config: "a: &" + strings.Repeat("y", 100) + " 1\n",
			want:   "anchor &" + strings.Repeat("y", 40) + "… (line 1)", part: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			merged, changed, err := MergeHold(tc.config)
			if err == nil {
				t.Fatalf("no error; changed=%v merged=%q", changed, merged)
			}
			if got := err.Error(); (tc.part && !strings.Contains(got, tc.want)) || (!tc.part && got != tc.want) {
				t.Errorf("error\n%s\nwant\n%s", got, tc.want)
			}
			var le *LimitError
			if errors.As(err, &le) != tc.limit {
				t.Errorf("limit error = %v, want %v", !tc.limit, tc.limit)
			}
			if changed || merged != "" {
				t.Errorf("changed=%v merged=%q with an error", changed, merged)
			}
		})
	}
}

// Values Istio accepts for the hold, in either spelling, count as set.
func TestMergeHoldUserSet(t *testing.T) {
	for _, config := range []string{
		"holdApplicationUntilProxyStarts: false",
		"holdApplicationUntilProxyStarts: True",
		"holdApplicationUntilProxyStarts: yes", // YAML 1.1, as Istio reads it
		"holdApplicationUntilProxyStarts: N",
		"holdApplicationUntilProxyStarts: !!bool on",
		"holdApplicationUntilProxyStarts: !!bool \"true\"",
		"holdApplicationUntilProxyStarts:", // null: unset, the mesh default
		"holdApplicationUntilProxyStarts: ~",
		"'holdApplicationUntilProxyStarts': false",
		"hold_application_until_proxy_starts: false",
		"hold_application_until_proxy_starts: true",
		"hold_application_until_proxy_starts: null",
		// Istio reads the camelCase key and never looks at the other.
		"hold_application_until_proxy_starts: \"x\"\nholdApplicationUntilProxyStarts: false",
	} {
		merged, changed, err := MergeHold(config)
		if err != nil || changed || merged != "" {
			t.Errorf("MergeHold(%q) = %q, %v, %v; want it left as set", config, merged, changed, err)
		}
	}
}

func TestCountMarks(t *testing.T) {
	for in, want := range map[string]int{
		"":                         0,
		"concurrency: 2":           1,
		"a: 1\nb: 2\n":             4,
		"a: 1\r\nb: 2\r":           4,
		"{a: [1, 2]}":              6,
		"- a\n- b":                 3,
		"? a\n: 1":                 3,
		"a: -1\nb: -x?y-":          4, // the last - ends the text
		"a: b\u0085c\u2028d\u2029": 4,
		"-":                        1,
		"a: \"x, y\" # z: w":       3, // counted in quotes and comments too
	} {
		if got := CountMarks(in); got != want {
			t.Errorf("CountMarks(%q) = %d, want %d", in, got, want)
		}
	}
}

// Where the node tree and Istio's reading disagree, or Istio rejects the
// config, the pod is left alone (issue 24, rows 5 and 6: the webhook used to
// add the hold after a hold Istio read, and mutate configs Istio rejects).
// Messages claim that Istio rejects a config only when it does.
func TestMergeHoldAgreesWithIstio(t *testing.T) {
	const tagged = "does not read as that key"
	for config, want := range map[string]string{
		"!!binary aG9sZEFwcGxpY2F0aW9uVW50aWxQcm94eVN0YXJ0cw==: false":                 tagged,
		"{!!binary aG9sZEFwcGxpY2F0aW9uVW50aWxQcm94eVN0YXJ0cw==: false}":               tagged,
		"? !!binary aG9sZEFwcGxpY2F0aW9uVW50aWxQcm94eVN0YXJ0cw==\n: false":             tagged,
		"concurrency: 2\n!!binary aG9sZF9hcHBsaWNhdGlvbl91bnRpbF9wcm94eV9zdGFydHM=: x": "Istio rejects it",
		"concurrency: .nan":          "json: unsupported value: NaN); Istio rejects it",
		"tracing: {sampling: -.Inf}": "json: unsupported value: -Inf); Istio rejects it",
		"unknownField: .inf":         "json: unsupported value: +Inf); Istio rejects it",
		"concurrency: x":             "is not a ProxyConfig Istio reads",
		"\t":                         "Istio rejects it",
		// yaml.v3 reads a null key, Istio's YAML reader an empty one.
		"? !": "has a null mapping key (line 1); istio-aux does not read it",
	} {
		merged, changed, err := MergeHold(config)
		if err == nil || changed || !strings.Contains(err.Error(), want) {
			t.Errorf("MergeHold(%q) = %q, %v, %v; want an error saying %q", config, merged, changed, err, want)
		}
	}
	// Tags Istio reads as the webhook does are no problem.
	for config, want := range map[string]string{
		"x: !!binary aGVsbG8=": "x: !!binary aGVsbG8=\nholdApplicationUntilProxyStarts: true\n",
		"concurrency: !!str 2": "concurrency: !!str 2\nholdApplicationUntilProxyStarts: true\n",
	} {
		if merged, changed, err := MergeHold(config); err != nil || !changed || merged != want {
			t.Errorf("MergeHold(%q) = %q, %v, %v; want %q", config, merged, changed, err, want)
		}
	}
}
