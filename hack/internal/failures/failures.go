// Package failures reads the output of `go test -v` and says, for each test
// that failed and has no failed subtest, what it logged last: its error, and
// the lines just before it. A suite's output runs to thousands of lines, and
// CI keeps only the last few dozen of a failed run; hack/stages.sh prints
// this digest last, so that the reason stays in what CI keeps.
package failures

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
)

var (
	// "=== RUN   TestX/sub": the lines after it, up to the next marker,
	// are TestX/sub's (CONT and NAME say whose lines follow when parallel
	// tests interleave).
	marker = regexp.MustCompile(`^=== (RUN|CONT|NAME|PAUSE)\s+(\S+)`)
	// "    --- FAIL: TestX/sub (1.23s)", at any depth (PASS and SKIP too:
	// an outcome, never part of a message).
	outcome = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(`)
	// "    file_test.go:12: message": where one logged message begins;
	// the more-indented lines after it continue it.
	begins = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)
)

// A message is one t.Log, t.Error or t.Fatal: its first line and how many
// lines followed it.
type message struct {
	first string
	more  int
}

// Options bound the digest.
type Options struct {
	// PerTest is how many of a failed test's last messages are shown.
	PerTest int
	// Width cuts each shown line.
	Width int
	// Lines bounds the whole digest.
	Lines int
}

// Digest reads `go test -v` output from r and writes to w, for each failed
// test without a failed subtest (in the order their failures were
// reported), its name and the first line of each of its last PerTest
// messages. It writes nothing when no test failed.
func Digest(r io.Reader, w io.Writer, o Options) error {
	logged := map[string][]message{}
	var order []string
	seen := map[string]bool{}
	cur := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if m := marker.FindStringSubmatch(line); m != nil {
			if m[1] != "PAUSE" {
				cur = m[2]
			}
			continue
		}
		if m := outcome.FindStringSubmatch(line); m != nil {
			if m[1] == "FAIL" && !seen[m[2]] {
				seen[m[2]] = true
				order = append(order, m[2])
			}
			continue
		}
		if cur == "" {
			continue
		}
		switch {
		case begins.MatchString(line):
			logged[cur] = append(logged[cur], message{first: strings.TrimSpace(line)})
		case strings.HasPrefix(line, "    ") && len(logged[cur]) > 0:
			logged[cur][len(logged[cur])-1].more++
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	var out []string
	for _, name := range order {
		if hasFailedChild(name, order) {
			continue
		}
		out = append(out, "FAIL "+name)
		msgs := logged[name]
		msgs = msgs[max(0, len(msgs)-o.PerTest):]
		if len(msgs) == 0 {
			out = append(out, "  (logged nothing)")
		}
		for _, m := range msgs {
			line := "  " + cut(m.first, o.Width)
			if m.more > 0 {
				line += fmt.Sprintf(" [+%d lines]", m.more)
			}
			out = append(out, line)
		}
	}
	if len(out) > o.Lines {
		out = append(out[:o.Lines-1], fmt.Sprintf("(%d more lines)", len(out)-o.Lines+1))
	}
	for _, l := range out {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}

// hasFailedChild reports whether a subtest of name failed too: then the
// subtest's messages say why, not name's.
func hasFailedChild(name string, failedTests []string) bool {
	for _, f := range failedTests {
		if strings.HasPrefix(f, name+"/") {
			return true
		}
	}
	return false
}

// cut shortens s to width runes, marking the cut.
func cut(s string, width int) string {
	r := []rune(s)
	if width <= 0 || len(r) <= width {
		return s
	}
	return string(r[:width-1]) + "…"
}
