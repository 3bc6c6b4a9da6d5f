package proxyconfig

import (
	"fmt"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// Any user who can create a pod chooses proxy.istio.io/config, up to the API
// server's 256 KiB limit on a pod's annotations, while the webhook's replicas
// have 256 MiB of memory and the API server waits 5 s. What a YAML parser
// costs depends on a document's structure more than on its bytes: about
// 0.5 KiB per node in block style for yaml.v3 and up to twice that for
// Istio's yaml.v2, and past about 128 nodes in flow style on one line some
// 1.5 KiB per node for either (their scanners queue a line's tokens while it
// could still be a key). MergeHold parses a config three times (its node
// tree; Istio's reading of it and of the result), so it reads one only when
// it is under all the limits below, which keep an admission within 5 ms and
// 1 MiB (the webhook's TestAdmitBounds*, FuzzAdmitBounds). Past them the pod
// is left unchanged with a warning that names the limit; the user can still
// set the hold in the config.
const (
	// MaxBytes is the largest proxy.istio.io/config istio-aux reads: 12
	// times a large real one (concurrency, tracing, five proxyMetadata
	// variables, stats matchers: 665 bytes, realProxyConfig in the
	// webhook's tests).
	MaxBytes = 8 << 10
	// MaxMarks is the most line breaks and YAML indicators (see
	// CountMarks) istio-aux reads in a proxy config, which bounds the nodes
	// the parsers build: 4 times the 58 of that real one.
	MaxMarks = 256
	// MaxLineMarks is the most marks on one line: a config written as JSON
	// on one line has about two per field.
	MaxLineMarks = 128
)

// LimitError is a proxy config istio-aux does not read because it is over
// one of the limits above; Istio may well accept it.
type LimitError struct{ msg string }

func (e *LimitError) Error() string { return e.msg }

// TooLong is the *LimitError of a config longer than MaxBytes, for a caller
// that knows so without holding the text (the webhook's decoder does not
// unquote one whose JSON is too long to be within the limit).
func TooLong() error {
	return &LimitError{fmt.Sprintf("%s is longer than the %d bytes (%d KiB) istio-aux reads",
		keys.AnnotationProxyConfig, MaxBytes, MaxBytes>>10)}
}

// CheckLimits returns a *LimitError when config is over a limit. It reads
// config once and allocates only for the error.
func CheckLimits(config string) error {
	if len(config) > MaxBytes {
		return TooLong()
	}
	n, line := marks(config)
	if n > MaxMarks {
		return &LimitError{fmt.Sprintf("%s has %d line breaks and YAML indicators (, : [ ] { } - ?), over the %d istio-aux reads",
			keys.AnnotationProxyConfig, n, MaxMarks)}
	}
	if line > MaxLineMarks {
		return &LimitError{fmt.Sprintf("%s has %d YAML indicators (, : [ ] { } - ?) on one line, over the %d istio-aux reads: break the line",
			keys.AnnotationProxyConfig, line, MaxLineMarks)}
	}
	return nil
}

// CountMarks counts the bytes of s that can start or end a YAML node: line
// breaks (including NEL, LS and PS, which YAML also breaks lines on), the
// flow indicators , [ ] { }, every ':', and '-' or '?' followed by a blank
// (the only way they are indicators). Every node but the first needs one of
// these before it, so the count bounds the node tree, whatever the quoting:
// marks inside quoted strings are counted too, which only overestimates.
func CountMarks(s string) int {
	n, _ := marks(s)
	return n
}

// marks returns CountMarks(s) and the most marks on one line of s (a line
// break counts on the line it ends).
func marks(s string) (total, longestLine int) {
	line := 0
	mark := func(breaks bool) {
		total++
		line++
		longestLine = max(longestLine, line)
		if breaks {
			line = 0
		}
	}
	for i := range len(s) {
		switch s[i] {
		case '\n':
			mark(true)
		case ',', '[', ']', '{', '}', ':':
			mark(false)
		case '\r':
			if i+1 == len(s) || s[i+1] != '\n' {
				mark(true)
			}
		case '-', '?':
			if i+1 == len(s) || isBlank(s[i+1]) {
				mark(false)
			}
		case 0xC2: // NEL, U+0085
			if i+1 < len(s) && s[i+1] == 0x85 {
				mark(true)
			}
		case 0xE2: // LS and PS, U+2028 and U+2029
			if i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xA8 || s[i+2] == 0xA9) {
				mark(true)
			}
		}
	}
	return total, longestLine
}

func isBlank(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }
