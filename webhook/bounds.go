package webhook

import (
	"fmt"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// Any user who can create a pod chooses proxy.istio.io/config, up to the API
// server's 256 KiB limit on a pod's annotations, while the webhook's replicas
// have 256 MiB of memory and the API server waits 5 s. What yaml.v3 costs
// depends on a document's structure more than on its bytes: about 0.5 KiB
// per node in block style, up to 3 KiB in flow style on one long line (the
// scanner then queues up to 1,024 characters' worth of tokens). So mergeHold
// parses a config only when it is under both limits below, which keep Admit
// within 5 ms and 1 MiB (TestAdmitBounds*, FuzzAdmitBounds). Past them the
// pod is left unchanged with a warning that names the limit; the user can
// still set the hold in the config.
const (
	// MaxProxyConfigBytes is the largest proxy.istio.io/config istio-aux
	// reads: 12 times a large real one (concurrency, tracing, five
	// proxyMetadata variables, stats matchers: 665 bytes, realProxyConfig
	// in the tests).
	MaxProxyConfigBytes = 8 << 10
	// MaxProxyConfigMarks is the most line breaks and YAML indicators (see
	// countMarks) istio-aux reads in a proxy config, which bounds the nodes
	// yaml.v3 builds: 4 times the 58 of that real one.
	MaxProxyConfigMarks = 256
)

// limitError is a proxy config istio-aux does not read because it is over
// one of the limits above; Istio may well accept it.
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

// checkLimits returns a *limitError when config is over a limit. It reads
// config once and allocates only for the error.
func checkLimits(config string) error {
	if len(config) > MaxProxyConfigBytes {
		// decodePod reads no more than a few bytes past the limit.
		return &limitError{fmt.Sprintf("%s is longer than the %d bytes (%d KiB) istio-aux reads",
			keys.AnnotationProxyConfig, MaxProxyConfigBytes, MaxProxyConfigBytes>>10)}
	}
	if n := countMarks(config); n > MaxProxyConfigMarks {
		return &limitError{fmt.Sprintf("%s has %d line breaks and YAML indicators (, : [ ] { } - ?), over the %d istio-aux reads",
			keys.AnnotationProxyConfig, n, MaxProxyConfigMarks)}
	}
	return nil
}

// countMarks counts the bytes of s that can start or end a YAML node: line
// breaks (including NEL, LS and PS, which YAML also breaks lines on), the
// flow indicators , [ ] { }, every ':', and '-' or '?' followed by a blank
// (the only way they are indicators). Every node but the first needs one of
// these before it, so the count bounds the node tree, whatever the quoting:
// marks inside quoted strings are counted too, which only overestimates.
func countMarks(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\n', ',', '[', ']', '{', '}', ':':
			n++
		case '\r':
			if i+1 == len(s) || s[i+1] != '\n' {
				n++
			}
		case '-', '?':
			if i+1 == len(s) || isBlank(s[i+1]) {
				n++
			}
		case 0xC2: // NEL, U+0085
			if i+1 < len(s) && s[i+1] == 0x85 {
				n++
			}
		case 0xE2: // LS and PS, U+2028 and U+2029
			if i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xA8 || s[i+2] == 0xA9) {
				n++
			}
		}
	}
	return n
}

func isBlank(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }
