package kubectl

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// escape is what a terminal may be shown of s: every character that is
// neither graphic nor a space (the C0 and C1 controls, DEL, format
// characters such as the bidi overrides, the line and paragraph
// separators) becomes a Go escape (\x1b, \n, \u202e), and every byte that
// is not UTF-8 \xNN. The reports carry text that tenants write (Event
// messages with a quit command's stderr, annotations, logs): escaped, it
// shows as text and cannot retitle the window, move the cursor, clear the
// screen or reorder what is printed around it. Backslashes stay as they
// are: the commands the reports print must paste as they read.
func escape(s string) string {
	if !strings.ContainsFunc(s, unprintable) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unprintable(r):
			b.WriteString(s[i : i+size])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// unprintable reports a character escape does not print as it is; a byte
// that is not UTF-8 decodes as utf8.RuneError, which counts.
func unprintable(r rune) bool {
	return r == utf8.RuneError || r != ' ' && !unicode.IsGraphic(r)
}
