package settings

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"knative.dev/pkg/configmap"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// Keys are every key of config-istio-aux that some component reads; any
// other is a typo or a leftover, and is ignored with a warning (Ignored).
var Keys = []string{names.KeyMode, KeySidecars, KeyQuitCommand, KeyQuitNative, KeyResync, KeyNATSURL}

// The _example key documents every key and is read by nothing; the
// ConfigMap of config/ carries a checksum of it in an annotation, as
// knative's ConfigMaps do (knative.dev/pkg/configmap, whose checksum and
// names these are), so that an _example edited in place, by someone who
// took it for the configuration, is told apart from the shipped one.
const (
	ExampleKey                = configmap.ExampleKey
	ExampleChecksumAnnotation = configmap.ExampleChecksumAnnotation
)

// shippedExample is what config/'s _example sets, key by key (a test
// holds the two equal): an edited _example is compared with it to name
// what its editor meant to change.
var shippedExample = map[string]string{
	names.KeyMode:  "hold",
	KeySidecars:    "vault-agent,fluent-bit",
	KeyQuitCommand: DefaultQuitCommand,
	KeyQuitNative:  "false",
	KeyNATSURL: "nats://istio-aux-nats-0.istio-aux-nats-cluster.istio-aux.svc.cluster.local:4222," +
		"nats://istio-aux-nats-1.istio-aux-nats-cluster.istio-aux.svc.cluster.local:4222," +
		"nats://istio-aux-nats-2.istio-aux-nats-cluster.istio-aux.svc.cluster.local:4222",
	KeyResync: "5m",
}

// maxNamed bounds the keys and settings one warning names: a ConfigMap of
// 1 MiB may hold many thousands of keys, and a warning is an Event.
const maxNamed = 5

// Ignored says what someone wrote in cm that no component reads: keys no
// component knows (naming the key each most likely meant), and an _example
// whose checksum is not the annotation's (naming the settings its editor
// most likely meant to change). Each is one warning; nil when there is
// none. Ignoring is all that happens: the keys that are known still apply.
func Ignored(cm *corev1.ConfigMap) []string {
	if cm == nil {
		return nil
	}
	var out []string
	if w := unknownKeys(cm); w != "" {
		out = append(out, w)
	}
	if w := editedExample(cm); w != "" {
		out = append(out, w)
	}
	return out
}

// unknownKeys names the keys of cm's data that no component reads, and
// those of its binaryData (which none reads), sorted, at most maxNamed of
// them, each with the key it most likely misspells.
func unknownKeys(cm *corev1.ConfigMap) string {
	var unknown []string
	for k := range cm.Data {
		if k != ExampleKey && !slices.Contains(Keys, k) {
			unknown = append(unknown, k)
		}
	}
	for k := range cm.BinaryData {
		unknown = append(unknown, k+binarySuffix)
	}
	if len(unknown) == 0 {
		return ""
	}
	slices.Sort(unknown)
	var named []string
	for _, k := range unknown[:min(len(unknown), maxNamed)] {
		if k, binary := strings.CutSuffix(k, binarySuffix); binary {
			named = append(named, quote(k)+" in binaryData (settings are data)")
		} else if like := likelyKey(k); like != "" {
			named = append(named, fmt.Sprintf("%s (did you mean %q?)", quote(k), like))
		} else {
			named = append(named, quote(k))
		}
	}
	if more := len(unknown) - len(named); more > 0 {
		named = append(named, fmt.Sprintf("and %d more", more))
	}
	what := "key"
	if len(unknown) > 1 {
		what = "keys"
	}
	return fmt.Sprintf("ignored, as no component reads it: %s %s; the keys read are %s",
		what, strings.Join(named, ", "), strings.Join(Keys, ", "))
}

// binarySuffix marks a binaryData key among the unknown ones: a space,
// which no key holds.
const binarySuffix = " binary"

// likelyKey is the known key that k most likely misspells, or "": the
// same but for case, underscores or dots, or within a third of its length
// in edits (sidecar, quit_command, resync).
func likelyKey(k string) string {
	if len(k) > 64 {
		return ""
	}
	norm := strings.NewReplacer("_", "-", ".", "-", " ", "-").Replace(strings.ToLower(k))
	best, bestDist := "", 0
	for _, known := range Keys {
		if norm == known {
			return known
		}
		d := distance(norm, known)
		if strings.HasPrefix(known, norm) && len(norm) >= 4 {
			d = min(d, 1) // resync for resync-period
		}
		if d <= max(1, len(known)/3) && (best == "" || d < bestDist) {
			best, bestDist = known, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b (bytes; keys are ASCII).
func distance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		diag := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			diag, row[j] = row[j], min(row[j]+1, row[j-1]+1, diag+cost)
		}
	}
	return row[len(b)]
}

// editedExample says, when cm's _example is not the one its checksum
// annotation was made of, that _example is never read, and names the
// settings the edit most likely meant: those the edited _example sets to
// another value than the shipped one and than cm's own key (or its
// absence) says. A ConfigMap without the annotation is not checked (as
// knative does).
func editedExample(cm *corev1.ConfigMap) string {
	example, ok := cm.Data[ExampleKey]
	want, annotated := cm.Annotations[ExampleChecksumAnnotation]
	if !ok || !annotated {
		return ""
	}
	got := configmap.Checksum(example)
	if got == want {
		return ""
	}
	var meant []string
	edited := exampleSettings(example)
	for _, k := range Keys {
		v, ok := edited[k]
		if !ok || v == shippedExample[k] {
			continue
		}
		if cur, set := cm.Data[k]; set && strings.TrimSpace(cur) == strings.TrimSpace(v) {
			continue // also set where it is read
		}
		meant = append(meant, fmt.Sprintf("%s: %s", k, quote(v)))
	}
	msg := fmt.Sprintf("%s was edited (checksum %s, not the %s of annotation %s), and no component reads it", ExampleKey, got, quote(want), ExampleChecksumAnnotation)
	if len(meant) == 0 {
		return msg + ": a setting is a key of its own, above " + ExampleKey
	}
	if more := len(meant) - maxNamed; more > 0 {
		meant = append(meant[:maxNamed], fmt.Sprintf("and %d more", more))
	}
	return fmt.Sprintf("%s: to set %s, copy it above %s as a key of its own", msg, strings.Join(meant, ", "), ExampleKey)
}

// exampleSettings reads the settings an _example sets: its lines
// `key: value` at the start of a line (comments and indented lines are
// not settings), the value unquoted as YAML does for the scalars an
// _example holds. A line-by-line reading, not a YAML parser: linear in the
// text whatever it holds.
func exampleSettings(example string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(example) {
		line = strings.TrimRight(line, "\r\n")
		key, value, ok := strings.Cut(line, ":")
		if !ok || key == "" || !slices.Contains(Keys, key) {
			continue
		}
		out[key] = scalar(strings.TrimSpace(value))
	}
	return out
}

// scalar unquotes a YAML flow scalar: double-quoted (with Go's escapes,
// which cover those an _example uses), single-quoted, or plain up to a
// comment.
func scalar(v string) string {
	switch {
	case strings.HasPrefix(v, `"`):
		if q, err := strconv.QuotedPrefix(v); err == nil {
			if s, err := strconv.Unquote(q); err == nil {
				return s
			}
		}
	case strings.HasPrefix(v, "'"):
		if end := strings.LastIndex(v, "'"); end > 0 {
			return strings.ReplaceAll(v[1:end], "''", "'")
		}
	}
	if i := strings.Index(v, " #"); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v)
}

// quote quotes s, or its start when it is long (a warning is an Event).
func quote(s string) string {
	if len(s) > maxQuoted {
		return fmt.Sprintf("%q…", strings.ToValidUTF8(s[:maxQuoted], ""))
	}
	return strconv.Quote(s)
}
