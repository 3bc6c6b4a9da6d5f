package kubectl

import "testing"

func TestEscape(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"plain text, quotes and backslashes as they are": {`key "sidecar" in {.data.server-cert\.pem} → ok`, `key "sidecar" in {.data.server-cert\.pem} → ok`},
		"non-ASCII letters":                  {"naïve Ünïcödé 日本", "naïve Ünïcödé 日本"},
		"a window title and a clear screen":  {"\x1b]0;owned\x07\x1b[2J", `\x1b]0;owned\x07\x1b[2J`},
		"newlines, tabs, carriage returns":   {"a\nb\tc\rd", `a\nb\tc\rd`},
		"NUL and DEL":                        {"\x00\x7f", `\x00\x7f`},
		"C1 controls (CSI as one character)": {"\u009b2J\u0085", `\u009b2J\u0085`},
		"bidi overrides and isolates":        {"abc\u202edcba\u2066x\u2069", `abc\u202edcba\u2066x\u2069`},
		"zero-width and line separators":     {"a\u200bb\u2028c", `a\u200bb\u2028c`},
		"a tag character beyond the BMP":     {"\U000e0041", `\U000e0041`},
		"bytes that are not UTF-8":           {"ok\xff\xc3(", `ok\xff\xc3(`},
		"empty":                              {"", ""},
	}
	for name, tc := range tests {
		if got := escape(tc.in); got != tc.want {
			t.Errorf("%s: escape(%q) = %q, want %q", name, tc.in, got, tc.want)
		}
	}
}
