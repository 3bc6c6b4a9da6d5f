package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonString is a JSON string value kept as its literal text and unquoted
// only when read. A pod's annotations may hold 256 KiB, and JSON writes each
// <, > and & (the API server's encoder escapes them) as six bytes:
// encoding/json would unquote all of them into buffers as long as the
// escaped text (1.8 MiB for 256 KiB of &), while the webhook reads four.
type jsonString []byte

// UnmarshalJSON keeps the literal. It is a slice of the admission request's
// object, which outlives the pod view decodePod builds from it, and nothing
// writes to either.
func (s *jsonString) UnmarshalJSON(b []byte) error {
	switch {
	case string(b) == "null":
		*s = nil
	case len(b) > 0 && b[0] == '"':
		*s = b
	default:
		// The type error, worded and located as encoding/json does.
		var v string
		return json.Unmarshal(b, &v)
	}
	return nil
}

// value unquotes the string into at most limit bytes; longer reports
// whether it had more. It decodes as encoding/json does (invalid UTF-8 and
// lone surrogates become U+FFFD) and allocates only what it returns.
func (s jsonString) value(limit int) (v string, longer bool, err error) {
	if len(s) < 2 {
		return "", false, nil
	}
	lit := s[1 : len(s)-1]
	if bytes.IndexByte(lit, '\\') < 0 && utf8.Valid(lit) {
		// Nothing to unquote: the common case, and one allocation.
		return string(lit[:min(len(lit), limit)]), len(lit) > limit, nil
	}
	n, err := unquoteJSON(lit, nil, limit)
	if err != nil {
		return "", false, err
	}
	var b strings.Builder
	b.Grow(min(n, limit))
	if _, err := unquoteJSON(lit, &b, limit); err != nil {
		return "", false, err
	}
	return b.String(), n > limit, nil
}

var errBadString = errors.New("malformed JSON string")

// unquoteJSON decodes the inside of a JSON string literal into w (nil: only
// counts) and returns the decoded length, or limit+1 and more once past
// limit, where it stops; w gets the whole runes that fit in limit. It
// mirrors encoding/json's unquote.
func unquoteJSON(lit []byte, w *strings.Builder, limit int) (int, error) {
	n := 0
	put := func(r rune) {
		size := utf8.RuneLen(r)
		if w != nil && n+size <= limit {
			w.WriteRune(r)
		}
		n += size
	}
	for i := 0; i < len(lit) && n <= limit; {
		c := lit[i]
		switch {
		case c == '\\':
			if i+1 >= len(lit) {
				return 0, errBadString
			}
			switch e := lit[i+1]; e {
			case '"', '\\', '/', '\'':
				put(rune(e))
			case 'b':
				put('\b')
			case 'f':
				put('\f')
			case 'n':
				put('\n')
			case 'r':
				put('\r')
			case 't':
				put('\t')
			case 'u':
				r := hex4(lit[i+2:])
				if r < 0 {
					return 0, errBadString
				}
				i += 6
				if utf16.IsSurrogate(r) {
					// A pair makes one rune; anything else, U+FFFD.
					r2 := rune(-1)
					if i+1 < len(lit) && lit[i] == '\\' && lit[i+1] == 'u' {
						r2 = hex4(lit[i+2:])
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						put(dec)
						i += 6
						continue
					}
					r = utf8.RuneError
				}
				put(r)
				continue
			default:
				return 0, errBadString
			}
			i += 2
		case c == '"' || c < ' ':
			return 0, errBadString
		case c < utf8.RuneSelf:
			put(rune(c))
			i++
		default:
			r, size := utf8.DecodeRune(lit[i:])
			put(r)
			i += size
		}
	}
	return n, nil
}

// hex4 reads the four hex digits at the start of b, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
