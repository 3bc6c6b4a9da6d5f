package webhook

import (
	"encoding/json"
	"strings"
	"testing"
)

// jsonString must read every JSON string as encoding/json does, and a
// limited read must be a prefix of it.
//
//	go test -run XXX -fuzz FuzzJSONString -fuzztime 30s ./webhook/
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{
		``, `plain`, `\u0026\u003c\u003e`, `\ud83d\ude00 smile`, `\ud83d`, `\ud83dx`, `\udc00\ud83d`,
		`\ud83d\u0041`, "\xff\xfe", "caf\xc3\xa9", `\/\"\\\b\f\n\r\t`, "\xef\xbf\xbd", `\uFFFD`, `\u00e9\u00E9`,
	} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, inside []byte, limit int) {
		lit := []byte(`"` + string(inside) + `"`)
		if !json.Valid(lit) {
			t.Skip()
		}
		var want string
		if err := json.Unmarshal(lit, &want); err != nil {
			t.Fatal(err)
		}
		got, longer, err := jsonString(lit).value(len(lit) * 4)
		if err != nil || got != want || longer {
			t.Fatalf("value(%q) = %q, %v, %v; want %q", lit, got, longer, err, want)
		}
		limit = max(limit, 0) % (len(want) + 2)
		got, longer, err = jsonString(lit).value(limit)
		if err != nil || !strings.HasPrefix(want, got) || len(got) > limit || longer != (len(want) > limit) ||
			(longer && len(got) < limit-3) || (!longer && got != want) {
			t.Fatalf("value(%q, %d) = %q, %v, %v; want a prefix of %q", lit, limit, got, longer, err, want)
		}
	})
}

func TestJSONStringNullAndTypes(t *testing.T) {
	var s jsonString
	if err := s.UnmarshalJSON([]byte("null")); err != nil || s != nil {
		t.Errorf("null: %q, %v", s, err)
	}
	for _, b := range []string{`1`, `{}`, `[]`, `true`} {
		if err := s.UnmarshalJSON([]byte(b)); err == nil {
			t.Errorf("UnmarshalJSON(%s) = nil error", b)
		}
	}
}
